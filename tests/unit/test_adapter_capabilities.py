"""The adapter's capabilities are class attributes declared on the base class and
checked when a subclass is defined (``BatchSubmissionAdapter.__init_subclass__``); shared
code reads them, never probes an adapter with ``getattr``."""

from __future__ import annotations

import ast
from types import SimpleNamespace
from typing import Any

import pytest

from mmirage_beam.providers.base import BatchAdapterRegistry, BatchSubmissionAdapter
from tests.conftest import REPO


class _Minimal(BatchSubmissionAdapter):
    def build_request(self, custom_id: str, payload: Any, config: Any) -> dict:
        return {"custom_id": custom_id}

    def submit_chunk(self, chunk_id: str, requests: Any, config: Any) -> dict:
        return {}

    def parse_submission_result(self, raw_result: Any) -> Any:
        return None

    def check_batch_status(self, batch_id: str, config: Any) -> Any:
        return None

    def retrieve_results(self, batch_id: str, config: Any) -> Any:
        return iter(())


def test_the_built_in_providers_declare_how_they_adopt_a_lost_create():
    got = {
        name: (cls.adopts_by_metadata, cls.adopts_by_shape)
        for name in (
            "openai",
            "anthropic",
            "gemini",
            "mistral",
            "bedrock",
            "azure-openai",
            "groq",
            "together",
        )
        for cls in [BatchAdapterRegistry.get(name)]
    }
    assert got["anthropic"] == (False, True)
    assert all(v == (True, False) for k, v in got.items() if k != "anthropic"), got


def test_a_minimal_adapter_has_no_capability():
    assert not _Minimal.adopts_by_metadata and not _Minimal.adopts_by_shape
    assert not _Minimal.serializes_its_own_way and not _Minimal.estimates_its_own_size
    _Minimal.claim_batch("batch_1")  # the default records nothing, and does not fail
    assert _Minimal().find_candidate_batches(3, 0.0) == []


def test_a_declared_capability_without_its_method_is_refused_when_the_class_is_defined():
    with pytest.raises(TypeError, match="adopts_by_metadata = True but keeps the base"):

        class _Metadata(_Minimal):
            adopts_by_metadata = True

    with pytest.raises(TypeError, match="adopts_by_shape = True but keeps the base"):

        class _Shape(_Minimal):
            adopts_by_shape = True


def test_a_find_batch_of_its_own_declares_adoption_for_a_plugin_written_before_the_flag():
    class _Old(_Minimal):
        def find_batch(self, run_id: str, chunk_id: str, created_after: Any = None) -> Any:
            return None

    class _Refusing(_Old):
        adopts_by_metadata = False  # an explicit word wins

    assert _Old.adopts_by_metadata and not _Refusing.adopts_by_metadata


def test_own_serialization_and_size_are_set_when_the_class_is_defined_and_inherited():
    class _Own(_Minimal):
        def serialize_request(self, request: dict) -> bytes:
            return b"x\n"

    class _Child(_Own):
        pass

    class _Sized(_Minimal):
        def estimate_request_bytes(self, request: dict) -> int:
            return 1

    assert _Own.serializes_its_own_way and _Child.serializes_its_own_way
    assert not _Own.estimates_its_own_size and _Sized.estimates_its_own_size


def test_no_shared_module_probes_an_adapter_with_getattr():
    """``getattr(x, "<a name the adapter base class defines>", ...)`` outside the
    providers' own packages and the fake: a capability found by reflection."""
    names = {n for n in dir(BatchSubmissionAdapter) if not n.startswith("__")}
    found = []
    for path in (REPO / "mmirage_beam").rglob("*.py"):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith(("mmirage_beam/testing/", "mmirage_beam/providers/")):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in names
            ):
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert found == [], "\n".join(found)


def test_the_built_in_providers_declare_cancel_exact_counts_embeddings_and_inline_requests():
    names = ("openai", "anthropic", "gemini", "mistral", "bedrock", "vertex", "groq")
    got = {
        name: {
            flag
            for flag in (
                "cancels_batches",
                "counts_tokens_exactly",
                "takes_embeddings",
                "sends_requests_inline",
            )
            if getattr(BatchAdapterRegistry.get(name), flag)
        }
        for name in names
    }
    assert all("cancels_batches" in flags for flags in got.values()), got
    assert {n for n in names if "counts_tokens_exactly" in got[n]} == {
        "anthropic",
        "gemini",
        "vertex",
    }
    assert {n for n in names if "takes_embeddings" in got[n]} == {
        "openai",
        "gemini",
        "mistral",
        "vertex",
    }
    assert {n for n in names if "sends_requests_inline" in got[n]} == {"anthropic"}


def test_a_minimal_adapter_cannot_cancel_count_exactly_embed_or_send_inline():
    assert not _Minimal.cancels_batches and not _Minimal.counts_tokens_exactly
    assert not _Minimal.takes_embeddings and not _Minimal.sends_requests_inline


@pytest.mark.parametrize(
    "flag, method",
    [("cancels_batches", "cancel_batch"), ("counts_tokens_exactly", "exact_token_counter")],
)
def test_cancel_and_exact_counts_are_refused_without_their_method_and_set_by_one(flag, method):
    with pytest.raises(TypeError, match=f"{flag} = True but keeps the base class's {method}"):
        type("_Declared", (_Minimal,), {flag: True})
    old = type("_Old", (_Minimal,), {method: lambda self, *a: None})
    refusing = type("_Refusing", (old,), {flag: False})
    assert getattr(old, flag) and not getattr(refusing, flag)


def test_takes_embeddings_follows_the_config_class_and_is_checked_against_it():
    from mmirage_beam.providers.config import BatchProviderConfig
    from mmirage_beam.providers.openai.config import OpenAIBatchConfig

    class _Embeds(_Minimal, BatchSubmissionAdapter[OpenAIBatchConfig]):
        pass

    class _Refuses(_Embeds):
        takes_embeddings = False

    assert _Embeds.takes_embeddings and not _Refuses.takes_embeddings
    with pytest.raises(TypeError, match="takes_embeddings = True but its config class"):

        class _NoEndpoint(_Minimal, BatchSubmissionAdapter[BatchProviderConfig]):
            takes_embeddings = True


def test_inline_requests_are_refused_on_an_adapter_that_uploads_a_file():
    from mmirage_beam.providers.openai.adapter import OpenAIBatchAdapter

    with pytest.raises(TypeError, match="sends_requests_inline = True but uploads a file"):
        type("_Both", (OpenAIBatchAdapter,), {"sends_requests_inline": True})


def test_an_override_of_submit_chunk_below_the_fast_file_path_is_set_when_defined():
    from mmirage_beam.providers.anthropic.adapter import AnthropicBatchAdapter
    from mmirage_beam.providers.openai.adapter import OpenAIBatchAdapter

    assert not OpenAIBatchAdapter.submits_its_own_way
    assert not AnthropicBatchAdapter.submits_its_own_way
    own = type("_Own", (OpenAIBatchAdapter,), {"submit_chunk": lambda *a: None})
    lines = type("_Lines", (AnthropicBatchAdapter,), {"submit_chunk_lines": lambda *a: None})
    child = type("_Child", (own,), {})
    both = type(
        "_Both", (OpenAIBatchAdapter,), {"submit_chunk": lambda *a: None, "submit_chunk_file": 1}
    )
    assert own.submits_its_own_way and lines.submits_its_own_way and child.submits_its_own_way
    assert both.submits_its_own_way  # its submit_chunk_file's super() goes through submit_chunk


def test_cancel_of_a_provider_that_cannot_cancel_says_so_without_calling_it():
    from mmirage_beam.run.lookup import LOOKUP_FAILED, BatchStatusChecker

    checker = BatchStatusChecker([], clock=lambda: 5.0)
    checker._adapters.open("minimal", _Minimal, None, credentials={})
    checker._configs["minimal"] = None
    entry: Any = SimpleNamespace(provider="minimal", provider_batch_id="b1")
    status = checker.cancel_one(entry)
    assert status.status == LOOKUP_FAILED
    assert status.error == "'minimal' cannot cancel batches (its adapter has no cancel call)"


def test_embedding_outputs_are_refused_for_a_provider_whose_adapter_takes_none():
    from mmirage_beam.errors import ConfigError
    from mmirage_beam.providers.config import BatchProviderConfigRegistry

    groq = BatchProviderConfigRegistry.get("groq")()
    with pytest.raises(ConfigError, match="takes no embeddings batches") as err:
        groq.for_outputs(True, {"model"})
    assert "built for gemini, mistral, openai" in str(err.value)


def test_opened_adapters_open_each_provider_once_and_close_all_even_when_one_fails(caplog):
    from mmirage_beam.providers.base import OpenedAdapters

    events: list[str] = []

    class _Tracked(_Minimal):
        def setup(self, config: Any) -> None:
            events.append(f"setup {config}")

        def teardown(self) -> None:
            events.append("teardown")
            raise RuntimeError("closing failed: key sk-secret")

    adapters = OpenedAdapters(lambda exc: str(exc).replace("sk-secret", "***"))
    first = adapters.open("a", _Tracked, "cfg-a", credentials={})
    assert adapters.open("a", _Tracked, "cfg-a", credentials={}) is first
    adapters.open("b", _Tracked, "cfg-b", credentials={})
    assert sorted(adapters) == ["a", "b"] and adapters["a"] is first
    adapters.close()
    adapters.close()  # twice: nothing left to close
    assert events == ["setup cfg-a", "setup cfg-b", "teardown", "teardown"]
    assert len(adapters) == 0
    assert "sk-secret" not in caplog.text and "key ***" in caplog.text
