"""``output_schema``'s bare lookups (``{{ name }}``, ``{{ name.field }}``,
``{{ name.field.sub }}``) are resolved without Jinja, with Jinja's results and errors.

Each schema string of every shipped config (configs/, including the Beam YAML ones) and
every test config (tests/data, and the schemas tests/conftest.py and
tests/transforms/test_merge_golden.py build) is rendered both ways, ``SchemaRenderer(...,
lookup_fast_path=True)`` and the Jinja reference ``lookup_fast_path=False``, over real
rows of the config's own dataset, with the outputs as a submission (placeholders) and a
merge (text, parsed JSON, failed = MissingValue, null, a JSON answer missing its fields,
an unparsed string) would give them, and with each variable left out in turn.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import jmespath
import pytest
import yaml

from mmirage_beam.transforms.render import _LOOKUP_EXPR, MISSING, SchemaRenderer
from mmirage_beam.transforms.rows import placeholder
from tests.conftest import GSM8K_JSONL, REPO, base_config

_RAW = re.compile(r"\{% raw %\}(.*?)\{% endraw %\}", re.S)
_ROWS = 40


def _config_files() -> list[Path]:
    files = sorted((REPO / "configs").rglob("*.yaml")) + sorted(
        (REPO / "tests" / "data").rglob("*.yaml")
    )
    files += sorted((REPO / "mmirage_beam" / "examples").rglob("*.yaml"))
    return [f for f in files if "output_schema" in f.read_text(encoding="utf-8")]


def _find(node: Any, key: str) -> Iterator[Any]:
    """Every value under ``key`` anywhere in a YAML tree."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                yield v
            yield from _find(v, key)
    elif isinstance(node, list):
        for v in node:
            yield from _find(v, key)


def _leaves(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for v in node.values():
            yield from _leaves(v)
    elif isinstance(node, list):
        for v in node:
            yield from _leaves(v)
    elif isinstance(node, str):
        # Beam YAML renders its own Jinja first: {% raw %}...{% endraw %} reaches us bare
        yield _RAW.sub(lambda m: m.group(1), node)


def _dataset_rows(cfg: dict, config_file: Path) -> list[dict]:
    for ds in _find(cfg, "datasets"):
        for d in ds if isinstance(ds, list) else []:
            if str(d.get("type", "")).upper() != "JSONL":
                continue
            for base in (REPO, config_file.parent):
                path = base / str(d["path"])
                if path.is_file():
                    lines = path.read_text(encoding="utf-8").split("\n")
                    return [json.loads(x) for x in lines if x.strip()][:_ROWS]
    lines = GSM8K_JSONL.read_text(encoding="utf-8").split("\n")[:_ROWS]
    return [json.loads(x) for x in lines if x.strip()]


def _json_answer(schema: Any, i: int) -> dict:
    fields = schema if isinstance(schema, dict) else {}
    return {k: (i if k != "numbers" else [i, i + 1]) for k in fields} or {"value": i}


def _contexts(cfg: dict, rows: list[dict]) -> Iterator[dict]:
    inputs = [x for xs in _find(cfg, "inputs") if isinstance(xs, list) for x in xs]
    outputs = [x for xs in _find(cfg, "outputs") if isinstance(xs, list) for x in xs]
    outputs = [o for o in outputs if isinstance(o, dict) and "name" in o]
    for i, row in enumerate(rows):
        values = {x["name"]: jmespath.search(x["key"], row) for x in inputs if "key" in x}
        values.setdefault("question", row.get("question"))
        json_outs = [o for o in outputs if o.get("output_type") == "JSON"]
        variants = [
            {o["name"]: placeholder(f"{o['name']}-text-{i}") for o in outputs},
            {
                o["name"]: _json_answer(o.get("output_schema"), i)
                if o in json_outs
                else f"answer {i}: {row.get('answer', '')}"
                for o in outputs
            },
            {o["name"]: MISSING for o in outputs},
            {o["name"]: None for o in outputs},
            {o["name"]: {} for o in outputs},  # a JSON answer without its fields
            {
                o["name"]: {k: None for k in _json_answer(o.get("output_schema"), i)}
                for o in outputs
            },
            {o["name"]: json.dumps(_json_answer(o.get("output_schema"), i)) for o in outputs},
        ]
        for outs in variants:
            ctx = {**values, **outs}
            yield ctx
            if i == 0:  # each variable left out in turn: the undefined errors
                for name in list(ctx):
                    yield {k: v for k, v in ctx.items() if k != name}


def _outcome(renderer: SchemaRenderer, ctx: dict) -> tuple:
    try:
        value = renderer.render(ctx)
    except Exception as exc:  # noqa: BLE001 - the error is what is compared
        return ("error", type(exc), str(exc))
    # repr: tells 1 from 1.0, "1" and True, and compares what has no __eq__ (a bound
    # method of the same object, a TemplateReference) by what it shows
    return ("value", type(value), repr(value))


def _schemas() -> list[tuple[str, dict, Any]]:
    """(where, config dict, output_schema tree) for every config the test covers."""
    out = []
    for path in _config_files():
        text = path.read_text(encoding="utf-8")
        try:
            cfg = yaml.safe_load(text)
        except yaml.YAMLError:  # a Beam YAML pipeline: Beam renders the file with Jinja first
            from apache_beam.yaml.yaml_transform import expand_jinja

            cfg = yaml.safe_load(expand_jinja(text, {}))
        for schema in _find(cfg, "output_schema"):
            out.append((str(path.relative_to(REPO)), cfg, schema, path))
    tmp = Path("/nonexistent")
    conftest = base_config(tmp)
    out.append(
        ("tests/conftest.py", conftest, conftest["processing_params"]["output_schema"], REPO)
    )
    golden = base_config(tmp)
    golden["processing_params"]["outputs"].append(
        {
            "name": "facts",
            "output_type": "JSON",
            "output_schema": {"numbers": "list", "count": {"type": "int", "min": 0}},
        }
    )
    golden["processing_params"]["output_schema"]["count"] = "{{ facts.count }}"
    out.append(
        (
            "tests/transforms/test_merge_golden.py",
            golden,
            golden["processing_params"]["output_schema"],
            REPO,
        )
    )
    return out


_ALL = _schemas()


@pytest.mark.parametrize(
    "where,cfg,schema,path", _ALL, ids=[f"{w}#{n}" for n, (w, *_r) in enumerate(_ALL)]
)
def test_fast_lookup_equals_jinja_on_every_config_schema(where, cfg, schema, path):
    rows = _dataset_rows(cfg, path)
    leaves = sorted(set(_leaves(schema)))
    pairs = [(s, SchemaRenderer(s), SchemaRenderer(s, lookup_fast_path=False)) for s in leaves]
    pairs.append(
        ("<whole schema>", SchemaRenderer(schema), SchemaRenderer(schema, lookup_fast_path=False))
    )
    compared = 0
    for ctx in _contexts(cfg, rows):
        for source, fast, jinja in pairs:
            assert _outcome(fast, ctx) == _outcome(jinja, ctx), (where, source, ctx)
            compared += 1
    assert compared > len(pairs) * len(rows)


def test_the_configs_hold_lookups_the_fast_path_takes():
    lookups = set()
    for _where, _cfg, schema, _path in _ALL:
        for s in _leaves(schema):
            m = re.match(r"^\s*\{\{\s*(.+?)\s*\}\}\s*$", s)
            if m and _LOOKUP_EXPR.match(m.group(1)):
                lookups.add(m.group(1))
    # {{ question }}, {{ grading.final_answer }}, {{ facts.count }}, ...
    assert {"question", "grading.final_answer", "facts.count"} <= lookups


class _Obj:
    def __init__(self) -> None:
        self.field = {"sub": 7}

    @property
    def broken(self) -> Any:
        raise KeyError("not an attribute error")


_EDGE_SOURCES = [
    "{{ a }}",
    "{{ a.b }}",
    "{{ a.b.c }}",
    "{{a.items}}",  # a dict's method comes before its "items" key, as in Jinja
    "{{ a.keys }}",
    "{{ s.upper }}",
    "{{ o.field.sub }}",
    "{{ o.broken }}",
    "{{ range }}",  # a Jinja global
    "{{ dict }}",
    "{{ namespace }}",
    "{{ missing_name }}",
    "{{ missing_name.x }}",
    "{{ a.b.c.d }}",  # deeper than the fast path: Jinja
    "{{ none }}",
    "{{ true }}",
    "{{ self }}",
    "{{ a['b'] }}",
    "  {{ a.b }}\n",
]
_EDGE_CONTEXTS = [
    {"a": {"b": {"c": 1}, "items": 2, "keys": 3}, "s": "text", "o": _Obj()},
    {"a": {"b": None}, "s": placeholder("x-text-1"), "o": None},
    {"a": {"b": MISSING}, "s": MISSING, "o": MISSING},
    {"a": MISSING, "range": "shadowed", "dict": {"x": 1}},
    {"a": None},
    {"a": {"b": {"c": [1, {"d": 2}]}}},
    {"a": [1, 2]},
    {"a": {"b": {}}},
    {"a": placeholder("answer-text-0")},
    {},
]


@pytest.mark.parametrize("source", _EDGE_SOURCES)
def test_fast_lookup_equals_jinja_on_edge_cases(source):
    fast, jinja = SchemaRenderer(source), SchemaRenderer(source, lookup_fast_path=False)
    for ctx in _EDGE_CONTEXTS:
        assert _outcome(fast, ctx) == _outcome(jinja, ctx), (source, ctx)


def test_an_undefined_name_raises_jinjas_error():
    import jinja2

    with pytest.raises(jinja2.UndefinedError, match="^'answer' is undefined$"):
        SchemaRenderer({"x": "{{ answer }}"}).render({})
    with pytest.raises(jinja2.UndefinedError, match="^'dict object' has no attribute 'b'$"):
        SchemaRenderer({"x": "{{ a.b.c }}"}).render({"a": {}})
