"""Deterministic answers: the plain text, the JSON faked from a schema, and token usage.

Both providers answer through :func:`make_answer`; tests compute the same answers with
:func:`fake_answer_text` and :func:`fake_answer_json`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mmirage_beam.testing.fake_provider import limits
from mmirage_beam.testing.fake_provider.scripting import FENCE_MARKER, NOT_JSON_MARKER

_JSON_MAX_DEPTH = 12


def sha256_hex(text: str) -> str:
    """Hex SHA-256 of the UTF-8 text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fake_answer_text(prompt_text: str) -> str:
    """The fake's plain answer to a prompt.

    Args:
        prompt_text: the prompt text (user message texts joined by ``"\\n"``).

    Returns:
        ``"FAKE:" + sha256(prompt_text)[:12] + " " + collapsed[:60]``, right-stripped,
        where ``collapsed`` is the prompt with runs of whitespace replaced by one space.
    """
    collapsed = " ".join(prompt_text.split())
    return f"FAKE:{sha256_hex(prompt_text)[:12]} {collapsed[:60]}".rstrip()


def fake_answer_json(prompt_text: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The fake's JSON answer to a prompt that asks for output matching ``schema``.

    Every property of every object is present (required or not). Strings are
    ``"<key>-<8 hex digits of sha256(prompt, path)>"`` (or a date, date-time, time,
    email, uri or uuid for those formats), padded or cut to ``minLength``/``maxLength``;
    integers and numbers lie within ``minimum``/``maximum`` (and the exclusive bounds,
    ``multipleOf``), 0..100 when unbounded; booleans alternate by hash; arrays have
    ``max(minItems, 2)`` items (at most ``maxItems``); ``enum`` and ``const`` are honoured;
    ``anyOf``/``oneOf`` take the first non-null branch; ``allOf`` is merged; local
    ``$ref`` (``#/$defs/...``) is followed.

    Args:
        prompt_text: the prompt text.
        schema: a JSON schema whose root is an object.

    Returns:
        A dict that validates against ``schema``.

    Raises:
        ValueError: if the root is not an object schema or a ``$ref`` cannot be resolved.
    """
    faker = _JsonFaker(prompt_text, schema)
    value = faker.value(schema, "$", 0)
    if not isinstance(value, dict):
        raise ValueError("the root of a structured-output schema must be an object")
    return value


class _JsonFaker:
    """Builds a deterministic instance of a JSON schema from a prompt hash."""

    def __init__(self, prompt_text: str, root: Mapping[str, Any]) -> None:
        self._seed = sha256_hex(prompt_text)
        self._root = root

    def _hex(self, path: str) -> str:
        return sha256_hex(f"{self._seed}:{path}")

    def _num(self, path: str) -> int:
        return int(self._hex(path)[:12], 16)

    def resolve(self, schema: Any) -> Any:
        """``schema`` with local ``$ref`` followed; raises ValueError if unresolvable."""
        for _ in range(64):
            if not isinstance(schema, Mapping) or "$ref" not in schema:
                return schema
            ref = schema["$ref"]
            if not isinstance(ref, str) or not ref.startswith("#"):
                raise ValueError(f"unsupported $ref {ref!r}: only local references")
            target: Any = self._root
            for part in ref[1:].split("/"):
                if not part:
                    continue
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(target, Mapping) or part not in target:
                    raise ValueError(f"cannot resolve $ref {ref!r}")
                target = target[part]
            schema = target
        raise ValueError("$ref chain too long")

    def value(self, schema: Any, path: str, depth: int) -> Any:
        """A deterministic instance of ``schema`` at JSON path ``path``."""
        schema = self.resolve(schema)
        if not isinstance(schema, Mapping) or not schema:
            return self._string({}, path)
        if "const" in schema:
            return copy.deepcopy(schema["const"])
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return copy.deepcopy(enum[self._num(path) % len(enum)])
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                return self.value(self._pick_branch(options), path, depth + 1)
        if isinstance(schema.get("allOf"), list):
            return self.value(self._merge_all_of(schema), path, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            non_null = [k for k in kind if k != "null"]
            kind = non_null[0] if non_null else "null"
        if kind is None:
            if "properties" in schema or "required" in schema:
                kind = "object"
            elif "items" in schema or "prefixItems" in schema:
                kind = "array"
            else:
                kind = "string"
        if kind == "object":
            return self._object(schema, path, depth)
        if kind == "array":
            return self._array(schema, path, depth)
        if kind == "integer":
            return self._integer(schema, path)
        if kind == "number":
            return self._number(schema, path)
        if kind == "boolean":
            return self._num(path) % 2 == 0
        if kind == "null":
            return None
        return self._string(schema, path)

    def _pick_branch(self, options: list[Any]) -> Any:
        for option in options:
            resolved = self.resolve(option)
            if not (isinstance(resolved, Mapping) and resolved.get("type") == "null"):
                return option
        return options[0]

    def _merge_all_of(self, schema: Mapping[str, Any]) -> dict[str, Any]:
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        for sub in schema["allOf"]:
            resolved = self.resolve(sub)
            if not isinstance(resolved, Mapping):
                continue
            for key, val in resolved.items():
                if key == "properties" and isinstance(val, Mapping):
                    merged["properties"] = {**merged.get("properties", {}), **val}
                elif key == "required" and isinstance(val, list):
                    merged["required"] = list(merged.get("required", [])) + val
                else:
                    merged.setdefault(key, val)
        return merged

    def _object(self, schema: Mapping[str, Any], path: str, depth: int) -> dict[str, Any]:
        props = schema.get("properties")
        props = props if isinstance(props, Mapping) else {}
        required = [r for r in schema.get("required") or [] if isinstance(r, str)]
        keys = list(props) if depth <= _JSON_MAX_DEPTH else [k for k in props if k in required]
        keys += [r for r in required if r not in keys]
        return {key: self.value(props.get(key, {}), f"{path}.{key}", depth + 1) for key in keys}

    def _array(self, schema: Mapping[str, Any], path: str, depth: int) -> list[Any]:
        prefix = schema.get("prefixItems")
        items = schema.get("items", {})
        if isinstance(items, list):  # draft-4 tuple form
            prefix, items = items, {}
        min_items = int(schema.get("minItems", 0) or 0)
        count = max(min_items, 2 if depth <= _JSON_MAX_DEPTH else 0)
        if isinstance(prefix, list):
            count = max(count, len(prefix))
        max_items = schema.get("maxItems")
        if isinstance(max_items, int):
            count = min(count, max_items)
        out = []
        for i in range(count):
            item_schema = prefix[i] if isinstance(prefix, list) and i < len(prefix) else items
            out.append(self.value(item_schema, f"{path}[{i}]", depth + 1))
        return out

    def _string(self, schema: Mapping[str, Any], path: str) -> str:
        digest = self._hex(path)
        n = int(digest[:12], 16)
        fmt = schema.get("format")
        if fmt == "date-time":
            text = f"2024-01-{1 + n % 28:02d}T12:{n % 60:02d}:00Z"
        elif fmt == "date":
            text = f"2024-01-{1 + n % 28:02d}"
        elif fmt == "time":
            text = f"12:{n % 60:02d}:00"
        elif fmt == "email":
            text = f"user{digest[:6]}@example.com"
        elif fmt in ("uri", "url"):
            text = f"https://example.com/{digest[:8]}"
        elif fmt == "uuid":
            text = str(uuid.UUID(digest[:32]))
        else:
            label = re.split(r"[.\[]", path)[-1].rstrip("]")
            if label in ("$", "") or label.isdigit():
                label = "item" if label.isdigit() else "value"
            text = f"{label}-{digest[:8]}"
        min_len = schema.get("minLength")
        if isinstance(min_len, int) and len(text) < min_len:
            text += "x" * (min_len - len(text))
        max_len = schema.get("maxLength")
        if isinstance(max_len, int):
            text = text[:max_len]
        return text

    @staticmethod
    def _bounds(schema: Mapping[str, Any]) -> tuple[float | None, bool, float | None, bool]:
        lo, hi = schema.get("minimum"), schema.get("maximum")
        lo_excl = hi_excl = False
        ex_lo, ex_hi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        if ex_lo is True:  # draft-4 boolean form
            lo_excl = lo is not None
        elif isinstance(ex_lo, (int, float)) and not isinstance(ex_lo, bool):
            if lo is None or ex_lo >= lo:
                lo, lo_excl = ex_lo, True
        if ex_hi is True:
            hi_excl = hi is not None
        elif isinstance(ex_hi, (int, float)) and not isinstance(ex_hi, bool):
            if hi is None or ex_hi <= hi:
                hi, hi_excl = ex_hi, True
        return lo, lo_excl, hi, hi_excl

    def _integer(self, schema: Mapping[str, Any], path: str) -> int:
        lo, lo_excl, hi, hi_excl = self._bounds(schema)
        ilo = None if lo is None else (math.floor(lo) + 1 if lo_excl else math.ceil(lo))
        ihi = None if hi is None else (math.ceil(hi) - 1 if hi_excl else math.floor(hi))
        ilo, ihi = _complete_range(ilo, ihi, 100)
        step = schema.get("multipleOf")
        step = (
            int(step) if isinstance(step, (int, float)) and step >= 1 and step == int(step) else 1
        )
        first = math.ceil(ilo / step) * step
        count = (ihi - first) // step + 1
        if count <= 0:
            return ilo
        return first + (self._num(path) % count) * step

    def _number(self, schema: Mapping[str, Any], path: str) -> float | int:
        if isinstance(schema.get("multipleOf"), (int, float)):
            step = schema["multipleOf"]
            if step > 0 and step == int(step):
                return self._integer(schema, path)
        lo, lo_excl, hi, hi_excl = self._bounds(schema)
        lo, hi = _complete_range(lo, hi, 100.0)
        if hi <= lo:
            return lo
        frac = (self._num(path) % 9999 + 1) / 10000  # strictly inside (0, 1)
        value = lo + frac * (hi - lo)
        rounded = round(value, 4)
        if lo < rounded < hi or (
            (rounded == lo and not lo_excl) or (rounded == hi and not hi_excl)
        ):
            return rounded
        return value


def _complete_range(lo: float | None, hi: float | None, width: float) -> tuple[float, float]:
    """The range a faked number is drawn from: ``(lo, hi)``, a missing bound ``width``
    away from the other, ``(0, width)`` when both are missing (``int`` bounds and width
    give ``int`` ends, ``float`` ones ``float`` ends)."""
    if lo is None and hi is None:
        return 0 * width, width
    if lo is None:
        return hi - width, hi
    if hi is None:
        return lo, lo + width
    return lo, hi


def schema_root_is_object(schema: Any) -> bool:
    """Whether ``schema`` (after local ``$ref``) is an object schema."""
    if not isinstance(schema, Mapping):
        return False
    try:
        resolved = _JsonFaker("", schema).resolve(schema)
    except ValueError:
        return False
    if not isinstance(resolved, Mapping):
        return False
    kind = resolved.get("type")
    return kind == "object" or (kind is None and "properties" in resolved)


# ---------------------------------------------------------------------------------------
# Prompt analysis shared by both providers
# ---------------------------------------------------------------------------------------


REFUSAL_TEXT = "I'm sorry, but I can't help with that."
# Markers that change the answer rather than fail the request.
FINISH_MARKERS = ("refusal", "length", "content_filter", "empty")


@dataclass(frozen=True)
class Answer:
    """An answer and its usage.

    ``finish`` is ``"stop"`` (a whole answer), ``"refusal"`` (``text`` is the refusal),
    ``"length"`` or ``"content_filter"`` (``text`` is the first half of the answer) or
    ``"empty"`` (``text`` is ``""``).
    """

    text: str
    input_tokens: int
    output_tokens: int
    finish: str = "stop"


def count_words(text: str) -> int:
    """The fake's token count: whitespace-separated words."""
    return len(text.split())


def make_answer(
    prompt_text: str, images: int, mode: str, schema: Any, marker: str | None = None
) -> Answer:
    """Answer text and usage; ``mode`` is ``"text"``, ``"json_object"`` or ``"json_schema"``;
    ``marker`` one of :data:`FINISH_MARKERS` (or anything else for a whole answer)."""
    if mode == "json_schema" and NOT_JSON_MARKER not in prompt_text:
        text = json.dumps(fake_answer_json(prompt_text, schema))
    elif mode == "json_object" and NOT_JSON_MARKER not in prompt_text:
        text = json.dumps({"answer": fake_answer_text(prompt_text)})
    else:
        text = fake_answer_text(prompt_text)
    if mode != "text" and FENCE_MARKER in prompt_text and NOT_JSON_MARKER not in prompt_text:
        text = f"```json\n{text}\n```"
    finish = marker if marker in FINISH_MARKERS else "stop"
    if finish == "refusal":
        text = REFUSAL_TEXT
    elif finish in ("length", "content_filter"):
        text = text[: max(1, len(text) // 2)]  # a cut JSON text is never valid JSON
    elif finish == "empty":
        text = ""
    return Answer(
        text=text,
        input_tokens=count_words(prompt_text) + limits.TOKENS_PER_IMAGE * images,
        output_tokens=count_words(text),
        finish=finish,
    )


def text_parts(content: Any, text_types: tuple[str, ...]) -> list[str]:
    """The texts of ``content`` (a string, or the parts whose type is in ``text_types``)."""
    if isinstance(content, str):
        return [content]
    out = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, Mapping) and part.get("type") in text_types:
                text = part.get("text")
                if isinstance(text, str):
                    out.append(text)
    return out


def count_parts(content: Any, image_types: tuple[str, ...]) -> int:
    """How many parts of ``content`` have a type in ``image_types``."""
    if not isinstance(content, list):
        return 0
    return sum(1 for p in content if isinstance(p, Mapping) and p.get("type") in image_types)
