"""The adapter's capabilities are class attributes declared on the base class and
checked when a subclass is defined (``BatchSubmissionAdapter.__init_subclass__``); shared
code reads them, never probes an adapter with ``getattr``."""

from __future__ import annotations

import ast
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
