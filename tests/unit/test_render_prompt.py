"""A prompt that is plain substitution (literal text and bare ``{{ name }}``,
``{{ name.field }}``, ``{{ name.field.sub }}``) is filled without Jinja, with Jinja's
bytes and errors.

Every prompt of every shipped config (configs/, including the Beam YAML ones, and
mmirage_beam/examples) and every test config (tests/data, and the prompt strings the
test modules and benchmarks set) is rendered both ways, ``PromptTemplate(...,
substitution_fast_path=True)`` and the Jinja reference ``substitution_fast_path=False``,
in the environment BuildRequests uses (``make_environment(reject_null=True)``), over
real rows of the config's own dataset, with each variable left out in turn and with each
variable set to edge values (None, ints, floats incl. 1e20 and nan, bools, lists, dicts,
unicode, lone surrogates, objects whose attributes raise). Templates that are more than
substitution are checked to fall back to Jinja.
"""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path
from typing import Any, Iterator

import jinja2
import jmespath
import markupsafe
import pytest
import yaml

from mmirage_beam.transforms.render import PromptTemplate, make_environment
from mmirage_beam.transforms.rows import placeholder
from tests.conftest import GSM8K_JSONL, REPO

_RAW = re.compile(r"\{% raw %\}(.*?)\{% endraw %\}", re.S)
_ROWS = 40


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


def _load_yaml(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:  # a Beam YAML pipeline: Beam renders the file with Jinja first
        from apache_beam.yaml.yaml_transform import expand_jinja

        return yaml.safe_load(expand_jinja(text, {}))


def _config_prompts() -> list[tuple[str, Any, Path, str]]:
    """(where, config dict, config file, prompt) for every YAML config's prompts."""
    files = sorted((REPO / "configs").rglob("*.yaml"))
    files += sorted((REPO / "tests" / "data").rglob("*.yaml"))
    files += sorted((REPO / "mmirage_beam" / "examples").rglob("*.yaml"))
    out = []
    for path in files:
        cfg = _load_yaml(path)
        for prompt in _find(cfg, "prompt"):
            if isinstance(prompt, str):
                where = str(path.relative_to(REPO))
                out.append((where, cfg, path, _RAW.sub(lambda m: m.group(1), prompt)))
    return out


def _str_value(node: ast.AST, consts: dict[str, str]) -> Any:
    """The string an AST node stands for (a literal, a known constant, a ``.replace``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in consts:
        return consts[node.id]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "replace"
        and len(node.args) == 2
    ):
        base = _str_value(node.func.value, consts)
        args = [_str_value(a, consts) for a in node.args]
        if isinstance(base, str) and all(isinstance(a, str) for a in args):
            return base.replace(*args)
    return None


def _code_prompts() -> list[tuple[str, str]]:
    """(module, prompt) for every prompt string a test module or benchmark sets: a
    ``"prompt": "..."`` entry, a ``prompt="..."`` argument, ``x["prompt"] = "..."``, a
    ``*PROMPT* = "..."`` constant (and its ``.replace(a, b)``)."""
    found: dict[str, str] = {}
    files = sorted((REPO / "tests").rglob("*.py")) + sorted((REPO / "benchmarks").glob("*.py"))
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        consts: dict[str, str] = {}

        def value(node: ast.AST, consts: dict[str, str] = consts) -> Any:
            return _str_value(node, consts)

        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name) and "PROMPT" in target.id:
                    if isinstance(value(node.value), str):
                        consts[target.id] = value(node.value)
        for node in ast.walk(tree):
            candidates: list[ast.AST] = []
            if isinstance(node, ast.Dict):
                candidates += [
                    v
                    for k, v in zip(node.keys, node.values)
                    if isinstance(k, ast.Constant) and k.value == "prompt"
                ]
            elif isinstance(node, ast.keyword) and node.arg == "prompt":
                candidates.append(node.value)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                t = node.targets[0]
                if (
                    isinstance(t, ast.Subscript)
                    and isinstance(t.slice, ast.Constant)
                    and t.slice.value == "prompt"
                ) or (isinstance(t, ast.Name) and "PROMPT" in t.id):
                    candidates.append(node.value)
            for c in candidates:
                v = value(c)
                if isinstance(v, str):
                    found.setdefault(v, str(path.relative_to(REPO)))
    return [(where, prompt) for prompt, where in found.items()]


# Templates the fast path must take, or must leave to Jinja, beyond what the configs hold.
_EDGE_TEMPLATES = [
    "",
    "\n",
    "\n\n",
    "plain text",
    "{{ q }}",
    "{{q}}",
    "{{\tq\t}}",
    "{{ q }}\n",
    "{{ q }}\n\n",
    "{{ q }}\r\n",
    "{{ q }}\r",
    "a\r\nb\rc\n{{ q }}\r\n\r\n",
    "  {{ q }}  ",
    "{{ q }}{{ q }}{{ r }}",
    "{{ d.a }} {{ d.a.b }} {{ d.items }} {{ d.keys }} {{ s.upper }}",
    "{{ o.field.sub }} / {{ o.broken }}",
    "{{ range }} {{ dict }} {{ namespace }} {{ lipsum }}",
    "{{ missing_name }}",
    "{{ missing_name.x }}",
    "x } y }} z { w {",
    "{ {{ q }} }",
    "{{ (q) }}",
    "{{ d.a.b.c }}",  # deeper than the fast path: Jinja
    "{{ d['a'] }}",
    "{{ d[0] }}",
    "{{ q | upper }}",
    "{{ q ~ r }}",
    "{{ q if q else r }}",
    "{{ none }} {{ true }} {{ False }}",
    "{{ self }}",
    "{{ loop }}",
    "{{ caller }}",
    "{{- q }}",
    "{{ q -}}\n",
    "{{+ q }}",
    "{# a comment #}{{ q }}",
    "{% if q %}{{ q }}{% endif %}",
    "{% raw %}{{ q }}{% endraw %}",
    "{{ 'lit' }}",
    "{{ 1 }}",
    "ünïcödé ✓ \u2028 {{ q }} \u0085",
]

_EDGE_VALUES: list[Any] = [
    None,
    0,
    1,
    -7,
    2**70,
    1.5,
    1e20,
    -0.0,
    float("nan"),
    float("inf"),
    True,
    False,
    "",
    "text",
    "ünï ✓",
    "\ud800 lone",
    "a\r\nb",
    "{{ q }}",  # a value is data, never compiled
    [],
    [1, "a"],
    [1, None],
    (1, 2),
    {},
    {"a": 1},
    {"a": None},
    {"a": {"b": {"c": 1}}, "items": 2, "keys": 3},
    placeholder("answer-text-0"),
    markupsafe.Markup("<b>"),
    10**5000,  # str() raises ValueError (int digits limit): the same either way
]


class _Obj:
    def __init__(self) -> None:
        self.field = {"sub": 7}

    @property
    def broken(self) -> Any:
        raise KeyError("not an attribute error")

    def __str__(self) -> str:
        return "<obj>"


def _outcome(template: PromptTemplate, ctx: dict) -> tuple:
    try:
        value = template.render(ctx)
    except Exception as exc:  # noqa: BLE001 - the error is what is compared
        return ("error", type(exc), str(exc), getattr(exc, "message", None))
    return ("value", type(value), value)


def _pair(source: str) -> tuple[Any, Any]:
    """(fast, jinja) templates of ``source``, or the construction error of each."""
    env = make_environment(reject_null=True)

    def build(fast: bool) -> Any:
        try:
            return PromptTemplate(source, env, substitution_fast_path=fast)
        except Exception as exc:  # noqa: BLE001
            return ("construction error", type(exc), str(exc))

    return build(True), build(False)


def _dataset_rows(cfg: Any, config_file: Path) -> list[dict]:
    for ds in _find(cfg, "datasets"):
        for d in ds if isinstance(ds, list) else []:
            if str(d.get("type", "")).upper() != "JSONL":
                continue
            for base in (REPO, config_file.parent):
                path = base / str(d["path"])
                if path.is_file():
                    lines = path.read_text(encoding="utf-8").split("\n")
                    return [json.loads(x) for x in lines if x.strip()][:_ROWS]
    return _gsm8k_rows()


def _gsm8k_rows() -> list[dict]:
    lines = GSM8K_JSONL.read_text(encoding="utf-8").split("\n")[:_ROWS]
    return [json.loads(x) for x in lines if x.strip()]


def _names(source: str) -> list[str]:
    try:
        from jinja2 import meta

        return sorted(meta.find_undeclared_variables(make_environment().parse(source)))
    except jinja2.TemplateSyntaxError:
        return []


def _contexts(base: list[dict], names: list[str]) -> Iterator[dict]:
    """Each row as is; the first row with each variable left out in turn; and the first
    row with each variable set to each edge value."""
    yield from base
    first = base[0] if base else {}
    for name in list(first) + names:
        yield {k: v for k, v in first.items() if k != name}
    for name in names or ["q"]:
        for value in _EDGE_VALUES:
            yield {**first, name: value}


def _assert_same(where: str, source: str, contexts: Iterator[dict]) -> int:
    fast, jinja = _pair(source)
    if isinstance(fast, tuple) or isinstance(jinja, tuple):
        assert fast == jinja, (where, source)
        return 1
    compared = 0
    for ctx in contexts:
        assert _outcome(fast, ctx) == _outcome(jinja, ctx), (where, source, ctx)
        compared += 1
    return compared


_CONFIG_PROMPTS = _config_prompts()
_CODE_PROMPTS = _code_prompts()


@pytest.mark.parametrize(
    "where,cfg,path,source",
    _CONFIG_PROMPTS,
    ids=[f"{w}#{n}" for n, (w, *_r) in enumerate(_CONFIG_PROMPTS)],
)
def test_config_prompts_render_as_jinja_renders_them(where, cfg, path, source):
    inputs = [x for xs in _find(cfg, "inputs") if isinstance(xs, list) for x in xs]
    rows = _dataset_rows(cfg, path)
    base = [
        {x["name"]: jmespath.search(x["key"], row) for x in inputs if "key" in x} for row in rows
    ]
    assert _assert_same(where, source, _contexts(base, _names(source))) > len(rows)


@pytest.mark.parametrize(
    "where,source", _CODE_PROMPTS, ids=[f"{w}#{n}" for n, (w, _s) in enumerate(_CODE_PROMPTS)]
)
def test_test_and_benchmark_prompts_render_as_jinja_renders_them(where, source):
    rows = _gsm8k_rows()
    names = _names(source)
    base = [
        {"question": r["question"], "reference": r["answer"], "answer": r["answer"], "q": i}
        for i, r in enumerate(rows)
    ]
    assert _assert_same(where, source, _contexts(base, names)) > len(rows)


@pytest.mark.parametrize("source", _EDGE_TEMPLATES)
def test_edge_templates_render_as_jinja_renders_them(source):
    base = [
        {"q": "x", "r": 2, "d": {"a": {"b": {"c": 1}}, "items": 1}, "s": "s", "o": _Obj()},
        {"q": None, "r": float("nan"), "d": {"a": None}, "s": None, "o": None},
        {"q": [1, {"a": None}], "r": 1e20, "d": {"a": "\ud83d"}, "s": 1, "o": _Obj()},
        {"q": "\ud800", "r": True, "d": [], "s": {"upper": 1}, "range": "shadowed"},
    ]
    assert _assert_same("edge", source, _contexts(base, _names(source) or ["q"])) > len(base)


def test_shipped_and_test_prompts_take_the_fast_path():
    # every config prompt is plain substitution today; the test prompts with filters
    # and blocks stay with Jinja
    for where, _cfg, _path, source in _CONFIG_PROMPTS:
        assert PromptTemplate(source, make_environment(reject_null=True)).substitution, where
    sources = {s for _w, s in _CODE_PROMPTS}
    fast = {s for s in sources if PromptTemplate(s).substitution}
    assert {"Answer concisely:\n{{ question }}", "x", "{{ nope }}"} <= fast
    assert "{{ question }} {{ notes | join(',') }}" in sources - fast
    assert len(_CONFIG_PROMPTS) >= 10 and len(sources) >= 12


@pytest.mark.parametrize(
    "source",
    [
        "{{ q | upper }}",
        "{{ d['a'] }}",
        "{{ d.a.b.c }}",
        "{{ self }}",
        "{{ none }}",
        "{{- q }}",
        "{# c #}{{ q }}",
        "{% if q %}{{ q }}{% endif %}",
        "{{ 'lit' }}",
    ],
)
def test_more_than_substitution_is_left_to_jinja(source):
    assert not PromptTemplate(source).substitution


def test_the_trailing_newline_and_the_errors_are_jinjas():
    env = make_environment(reject_null=True)
    t = PromptTemplate("Problem: {{ q }}\n\n", env)
    assert t.substitution and t.render({"q": 1}) == "Problem: 1\n"
    assert PromptTemplate("a\r\n{{ q }}\r\n", env).render({"q": "b"}) == "a\nb"
    with pytest.raises(jinja2.UndefinedError, match="^'q' is undefined$"):
        t.render({})
    from mmirage_beam.transforms.render import NullValueError

    with pytest.raises(NullValueError, match="^null value$"):
        t.render({"q": None})
    with pytest.raises(NullValueError, match=r"^a value holding null \(\[1, None\]\)$"):
        t.render({"q": [1, None]})
    assert t.render({"q": float("nan")}) == "Problem: nan\n"
    assert math.isnan(float(t.render({"q": float("nan")}).split()[1]))
    assert t.render({"q": 1e20}) == "Problem: 1e+20\n"
