"""A provider is one package: shared code never names a provider.

Counts, over every module of ``mmirage_beam/`` and ``pipelines/`` outside the provider
packages (``mmirage_beam/providers/<name>/``: a package is no shared code: Bedrock's
names the model vendors it serves, ``anthropic.*`` and ``meta.*``, and one provider
may build on another's, as ``vertex`` reuses ``gemini``'s request bodies and result
lines) and the fake
(``mmirage_beam/testing/fake_provider/``), the modules whose code names the provider:
identifiers, attributes, imports and string constants that are not docstrings (case
folded, as a substring: ``OpenAIBatchConfig`` names openai). Issue 16's target is at
most 2 such modules per provider (the registry of built-ins, and one more).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROVIDERS = ("openai", "anthropic", "gemini", "mistral", "bedrock", "vertex")
MAX_MODULES = 2


def _words(tree: ast.AST):
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            yield getattr(node, "module", None) or ""
            for alias in node.names:
                yield alias.name
                yield alias.asname or ""
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, ast.arg):
            yield node.arg
        elif isinstance(node, ast.keyword):
            yield node.arg or ""
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings:
                yield node.value


def modules_naming(provider: str) -> dict[str, int]:
    """``{module path: mentions}`` of the modules outside the provider packages and the
    fake whose code names ``provider``."""
    out: dict[str, int] = {}
    files = sorted([*(REPO / "mmirage_beam").rglob("*.py"), *(REPO / "pipelines").rglob("*.py")])
    for path in files:
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith("mmirage_beam/testing/fake_provider/") or (
            rel.startswith("mmirage_beam/providers/") and rel.count("/") > 2
        ):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        n = sum(w.lower().count(provider) for w in _words(tree))
        if n:
            out[rel] = n
    return out


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_provider_is_named_by_at_most_two_shared_modules(provider):
    found = modules_naming(provider)
    assert len(found) <= MAX_MODULES, found


def test_the_fakes_core_names_no_provider_whose_fake_lives_in_its_package():
    """Bedrock's fake registers itself (``mmirage_beam/testing/fake_registry.py``): no
    module of the fake's core, nor the registry, names it."""
    core = sorted((REPO / "mmirage_beam" / "testing").rglob("*.py"))
    assert core
    for path in core:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert not any("bedrock" in w.lower() for w in _words(tree)), path


def test_the_counter_sees_a_name():
    # the registry of built-ins imports each package by name
    assert "mmirage_beam/providers/__init__.py" in modules_naming("openai")


if __name__ == "__main__":  # python tests/unit/test_provider_structure.py: the counts
    for name in PROVIDERS:
        found = modules_naming(name)
        print(f"{name}: {len(found)} module(s) {found}")
