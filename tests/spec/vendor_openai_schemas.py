"""Regenerates ``openai_schemas.json`` from the official OpenAI OpenAPI spec.

Usage (not run by the tests)::

    git -C <openai-openapi checkout> show HEAD:openapi.json > /tmp/openapi.json
    python tests/spec/vendor_openai_schemas.py /tmp/openapi.json <commit> <date>

Keeps the component schemas the fake's responses are validated against, plus every
schema they reference (transitively), with descriptions, examples and ``x-*`` keys
removed (they do not change what validates).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOTS = (
    "Batch",
    "ListBatchesResponse",
    "OpenAIFile",
    "ListFilesResponse",
    "DeleteFileResponse",
    "CreateChatCompletionResponse",
    "Response",
    "CreateCompletionResponse",
    "CreateEmbeddingResponse",
    "ErrorResponse",
    "Error",
)
_PREFIX = "#/components/schemas/"
_DROP = {"description", "example", "examples", "deprecated"}


def _strip(node: Any, *, names: bool = False) -> Any:
    """Drops documentation keys; ``names``: ``node`` maps property names to schemas."""
    if isinstance(node, list):
        return [_strip(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if not names and (key in _DROP or key.startswith("x-")):
            continue
        out[key] = _strip(value, names=(not names and key in ("properties", "$defs")))
    return out


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_PREFIX):
            found.add(ref[len(_PREFIX) :])
        for value in node.values():
            _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)


def main(spec_path: str, commit: str, fetched: str) -> None:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    schemas = spec["components"]["schemas"]
    keep: set[str] = set()
    todo = list(ROOTS)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        found: set[str] = set()
        _refs(schemas[name], found)
        todo += sorted(found - keep)
    out = {
        "source": {
            "repository": "https://github.com/openai/openai-openapi",
            "path": "openapi.json",
            "commit": commit,
            "fetched": fetched,
            "openapi": spec["openapi"],
            "info_version": spec["info"]["version"],
            "roots": list(ROOTS),
        },
        "components": {"schemas": {name: _strip(schemas[name]) for name in sorted(keep)}},
    }
    target = Path(__file__).with_name("openai_schemas.json")
    target.write_text(json.dumps(out, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"wrote {len(keep)} schemas to {target}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
