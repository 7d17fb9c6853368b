"""A provider is one folder, its fake included: shared code never names a provider.

Counts, over every module of ``mmirage_beam/`` and ``pipelines/`` outside the provider
packages (``mmirage_beam/providers/<name>/``: a package is no shared code: Bedrock's
names the model vendors it serves, ``anthropic.*`` and ``meta.*``, and one provider
may build on another's, as ``vertex`` reuses ``gemini``'s request bodies and result
lines), the fake's core (``mmirage_beam/testing/``) included, the modules whose code
names the provider: identifiers, attributes, imports and string constants that are not
docstrings (case folded, as a substring: ``OpenAIBatchConfig`` names openai). Issue 35's
target is 0 such modules, beside the registry of built-ins (:data:`REGISTRY_OF_BUILT_INS`)
and the false positives named in :data:`NOT_THE_PROVIDER` with their reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROVIDERS = ("openai", "anthropic", "gemini", "mistral", "bedrock", "vertex")
#: the OpenAI-compatible services the openai package serves (its profiles): checked in
#: the fake's core only (elsewhere "azure" is Azure Blob Storage, "together" a word)
PROFILES = ("azure", "groq", "together")
#: module -> why it may name every built-in provider: the one place listing them.
REGISTRY_OF_BUILT_INS = {
    "mmirage_beam/providers/__init__.py": "imports each built-in package by name, which "
    "registers its config, its adapter and its fake (the registry line)",
}
#: (module, provider) -> why the word there is not the provider.
NOT_THE_PROVIDER = {
    ("mmirage_beam/providers/tokens.py", "openai"): "bpe-openai / bpe_openai, the name of "
    "the tokenizer wheel that ships the BPE vocabularies, not the OpenAI provider",
}


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
    """``{module path: mentions}`` of the modules outside the provider packages (the
    fake's core included) whose code names ``provider``."""
    out: dict[str, int] = {}
    files = sorted([*(REPO / "mmirage_beam").rglob("*.py"), *(REPO / "pipelines").rglob("*.py")])
    for path in files:
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith("mmirage_beam/providers/") and rel.count("/") > 2:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        n = sum(w.lower().count(provider) for w in _words(tree))
        if n:
            out[rel] = n
    return out


@pytest.mark.parametrize("provider", PROVIDERS)
def test_no_shared_module_names_a_provider(provider):
    found = {
        module: n
        for module, n in modules_naming(provider).items()
        if module not in REGISTRY_OF_BUILT_INS and (module, provider) not in NOT_THE_PROVIDER
    }
    assert found == {}, found


def test_the_fakes_core_names_no_provider_and_imports_none():
    """``mmirage_beam/testing/`` (the fake's core and its registry) names no provider and
    imports nothing from ``mmirage_beam.providers``: every provider's fake registers
    itself (``mmirage_beam/testing/fake_registry.py``) and the core dispatches through
    the registry."""
    core = sorted((REPO / "mmirage_beam" / "testing").rglob("*.py"))
    assert len(core) > 10
    for path in core:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        words = [w.lower() for w in _words(tree)]
        named = [p for p in PROVIDERS + PROFILES if any(p in w for w in words)]
        assert not named, (path, named)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            assert not any(m.startswith("mmirage_beam.providers") for m in modules), path


def test_a_new_providers_fake_needs_no_edit_outside_its_folder(monkeypatch):
    """``tests/plugins/echo_provider/`` is a provider written from ``docs/plugins.md``: its
    fake registers itself and the shared server serves it, with its routes, credential
    header, error shape, endpoint names (``leading_errors.paths``) and base URL, while no
    shared module names it."""
    import json
    import urllib.error
    import urllib.request

    from mmirage_beam.testing import fake_registry
    from mmirage_beam.testing.fake_provider import FakeProviderServer

    monkeypatch.setattr(fake_registry, "_FAKES", dict(fake_registry._FAKES))
    from tests.plugins import echo_provider

    echo_provider.register()  # on the copy: no other test sees it
    assert all(not n for n in modules_naming("echo").values()), modules_naming("echo")

    def call(method, url, body=None, key="k"):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        if key:
            req.add_header("x-echo-key", key)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    with FakeProviderServer() as fake:
        base = fake.base_url_for("echo")
        assert base == fake.base_url + "/echo" == fake.echo_base_url
        assert ("Echo", "echo") in fake.labels()
        job = {"requests": [{"custom_id": "a", "prompt": "two plus two"}]}
        assert call("POST", base + "/jobs", job, key="") == (
            401,
            {"fault": {"status": 401, "reason": "x-echo-key is required"}},
        )
        status, created = call("POST", base + "/jobs", job)
        assert status == 200 and created["state"] == "done"
        assert call("GET", f"{base}/jobs/{created['id']}") == (200, created)
        assert fake.batches("echo") == [created]
        assert [r["custom_id"] for r in fake.submitted_requests("echo")] == ["a"]
        status, missing = call("GET", base + "/jobs/nope")
        assert status == 404 and set(missing) == {"fault"}
        fake.script(leading_errors={"status": 503, "count": 1, "paths": ["echo_jobs_get"]})
        assert call("GET", f"{base}/jobs/{created['id']}")[0] == 503
        assert call("GET", f"{base}/jobs/{created['id']}")[0] == 200
        assert fake.call_counts()["echo_jobs_get"] == 4
        # the built-ins still answer beside it (OpenAI's fake is the fallback)
        assert call("GET", fake.base_url + "/v1/nothing-here", key="")[0] == 404


def test_the_counter_sees_a_name():
    # the registry of built-ins imports each package by name
    assert "mmirage_beam/providers/__init__.py" in modules_naming("openai")


if __name__ == "__main__":  # python tests/unit/test_provider_structure.py: the counts
    for name in PROVIDERS:
        found = modules_naming(name)
        print(f"{name}: {len(found)} module(s) {found}")
