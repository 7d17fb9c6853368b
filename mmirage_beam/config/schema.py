"""Turn an output's ``output_schema`` into a JSON-schema object for structured output.

Accepted forms (MMIRAGE): a list of field names (all strings), or a mapping
``field: type`` or ``field: {type, min, max}``. Types: ``str|string``, ``int|integer``,
``float|number``, ``bool|boolean``, ``list|array`` (of strings, or ``items: <type>``),
``dict|object``. ``min``/``max`` become ``minimum``/``maximum`` for numbers and
``minLength``/``maxLength`` for strings, ``minItems``/``maxItems`` for arrays. Every field is
required and no other property is allowed (as OpenAI's ``strict: true`` demands).
"""

from __future__ import annotations

from typing import Any, TypedDict

from mmirage_beam.errors import ConfigError

__all__ = [
    "FieldSchema",
    "ObjectSchema",
    "json_schema_for",
]


class FieldSchema(TypedDict, total=False):
    """The JSON schema of one field: ``type`` always, the other keywords when the
    declaration asks for them (JSON Schema validation keywords,
    https://json-schema.org/draft/2020-12/json-schema-validation)."""

    type: str
    description: str
    items: dict[str, str]
    properties: dict[str, Any]
    additionalProperties: bool
    required: list[str]
    minimum: float
    maximum: float
    minLength: int
    maxLength: int
    minItems: int
    maxItems: int


class ObjectSchema(TypedDict):
    """The JSON schema of an output: an object of its fields, every field required and
    no other property allowed (OpenAI's ``strict: true``)."""

    type: str
    properties: dict[str, FieldSchema]
    required: list[str]
    additionalProperties: bool


_TYPES = {
    "str": "string",
    "string": "string",
    "text": "string",
    "int": "integer",
    "integer": "integer",
    "float": "number",
    "number": "number",
    "bool": "boolean",
    "boolean": "boolean",
    "list": "array",
    "array": "array",
    "dict": "object",
    "object": "object",
}
_BOUNDS = {
    "integer": ("minimum", "maximum"),
    "number": ("minimum", "maximum"),
    "string": ("minLength", "maxLength"),
    "array": ("minItems", "maxItems"),
}


def json_schema_for(output_schema: Any) -> ObjectSchema:
    """Build the JSON schema for ``output_schema``.

    Returns:
        ``{"type": "object", "properties": {...}, "required": [...],
        "additionalProperties": False}``.

    Raises:
        ConfigError: naming the field (relative key) on an unknown type or bad bound.
    """
    if isinstance(output_schema, list):
        if not output_schema or not all(isinstance(f, str) and f for f in output_schema):
            raise ConfigError("<list>", "a list output_schema must hold field names (strings)")
        spec: dict[str, Any] = {f: "string" for f in output_schema}
    elif isinstance(output_schema, dict) and output_schema:
        spec = output_schema
    else:
        raise ConfigError("<root>", "must be a list of field names or a mapping of field: type")
    props: dict[str, FieldSchema] = {}
    for name, decl in spec.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(str(name), "field names must be non-empty strings")
        props[name] = _field(name, decl)
    return {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


def _field(name: str, decl: Any) -> FieldSchema:
    if isinstance(decl, str) or decl is None:
        decl = {"type": decl or "string"}
    if not isinstance(decl, dict):
        raise ConfigError(name, f"must be a type name or {{type, min, max}}, got {decl!r}")
    unknown = sorted(set(decl) - {"type", "min", "max", "items", "description"})
    if unknown:
        raise ConfigError(
            f"{name}.{unknown[0]}",
            "unknown key; a field is {type, min, max, items, description}",
        )
    t = _TYPES.get(str(decl.get("type", "string")).lower())
    if t is None:
        raise ConfigError(
            f"{name}.type",
            f"unknown type {decl.get('type')!r}; use one of {', '.join(sorted(set(_TYPES)))}",
        )
    out = FieldSchema(type=t)
    if decl.get("description"):
        out["description"] = str(decl["description"])
    if t == "array":
        item_t = _TYPES.get(str(decl.get("items", "string")).lower())
        if item_t is None or item_t in ("array", "object"):
            raise ConfigError(f"{name}.items", f"unsupported item type {decl.get('items')!r}")
        out["items"] = {"type": item_t}
    if t == "object":
        out.update({"properties": {}, "additionalProperties": False, "required": []})
    for bound, jkey in zip(("min", "max"), _BOUNDS.get(t, (None, None))):
        if bound not in decl:
            continue
        if jkey is None:
            raise ConfigError(f"{name}.{bound}", f"bounds are not supported for type {t}")
        v = decl[bound]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(f"{name}.{bound}", f"must be a number, got {v!r}")
        if t != "number" and not float(v).is_integer():
            raise ConfigError(f"{name}.{bound}", f"must be an integer for type {t}, got {v!r}")
        out[jkey] = v if t == "number" else int(v)
    lo_key, hi_key = _BOUNDS.get(t, (None, None))
    if lo_key in out and hi_key in out and out[lo_key] > out[hi_key]:
        raise ConfigError(f"{name}.min", f"min {out[lo_key]} is greater than max {out[hi_key]}")
    return out
