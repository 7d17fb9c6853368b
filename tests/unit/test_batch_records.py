"""The typed records of a batch (``SubmittedBatch``, ``FoundBatch``), the generic
contract (``BatchSubmissionAdapter[ConfigT]``), and the plugins that still hand back
the provider's dict: converted once, where the base class receives it, and given back
unchanged by ``to_json()`` (so receipts keep their bytes)."""

from __future__ import annotations

import json
import typing
from typing import Any, Optional

import pytest

from mmirage_beam.providers.base import (
    BatchFields,
    BatchSubmissionAdapter,
    BatchSubmissionResult,
    FoundBatch,
    SubmittedBatch,
)
from mmirage_beam.providers.config import BatchProviderConfig

RAW = {
    "id": "batch_1",
    "status": "validating",
    "created_at": 1700000000,
    "input_file_id": "file-1",
    "metadata": {"mmirage_run_id": "r1", "mmirage_chunk_id": "c1"},
}


class _DictPlugin(BatchSubmissionAdapter):
    """A plugin written before the records: every answer is the provider's dict."""

    RETRY_SLEEP = staticmethod(lambda _secs: None)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.creates: list[str] = []
        self.fail_first_create = False

    def build_request(self, custom_id: str, payload: Any, config: Any) -> dict:
        return {"custom_id": custom_id}

    def submit_chunk(self, chunk_id: str, requests: Any, config: Any) -> dict:
        def create() -> dict:
            self.creates.append(chunk_id)
            if self.fail_first_create and len(self.creates) == 1:
                raise ConnectionError("the answer was lost")
            return {**RAW, "n": len(list(requests))}

        return self.create_once("plugin create", chunk_id, create)  # type: ignore[return-value]

    def find_batch(self, run_id: str, chunk_id: str, created_after: Any = None) -> Optional[dict]:
        return dict(RAW) if self.creates else None

    def parse_submission_result(self, raw_result: Any) -> BatchSubmissionResult:
        status = self._normalize_status(raw_result.get("status"))
        return BatchSubmissionResult(raw_result["id"], status, raw_result)

    def check_batch_status(self, batch_id: str, config: Any) -> Any:
        return None

    def retrieve_results(self, batch_id: str, config: Any) -> Any:
        return iter(())


def test_a_submission_dict_round_trips_byte_for_byte():
    adopted = {
        **RAW,
        "mmirage_adoption": {"method": "created_at+request_count", "confirmed": False},
    }
    for raw in (RAW, adopted):
        parsed = BatchSubmissionResult("batch_1", "in_progress", dict(raw))
        record = SubmittedBatch.from_json(raw, parsed)
        assert json.dumps(record.to_json()) == json.dumps(raw)  # same keys, same order
    record = SubmittedBatch.from_json(adopted, parsed)
    assert record.batch_id == "batch_1" and record.status == "in_progress"
    assert record.created_at == 1700000000.0 and record.input_file_id == "file-1"
    assert record.adoption == {"method": "created_at+request_count", "confirmed": False}
    assert "mmirage_adoption" not in record.raw
    assert SubmittedBatch.from_json(RAW, parsed).adoption is None
    with pytest.raises(ValueError, match="status must be one of"):
        SubmittedBatch("b", "validating")


def test_a_found_batch_is_adopted_as_a_submission():
    parsed = BatchSubmissionResult("batch_1", "in_progress", dict(RAW))
    found = FoundBatch.from_json(RAW, parsed, request_count=3)
    assert found.to_json() == RAW and found.request_count == 3
    plain = found.adopted()
    assert plain.adoption is None and plain.to_json() == RAW
    assert plain.input_file_id == "file-1" and plain.created_at == found.created_at
    shaped = found.adopted({"method": "created_at+request_count", "confirmed": False})
    assert shaped.to_json() == {**RAW, "mmirage_adoption": dict(shaped.adoption)}
    assert found.result() == BatchSubmissionResult("batch_1", "in_progress", RAW)


def test_batch_fields_read_paths_of_keys_and_indexes():
    fields = BatchFields(batch_id=("name",), input_file_id=("input_files", 0))
    job = {"name": "batches/1", "input_files": ["f-1"], "src": {"file_name": "files/2"}}
    assert fields.read(job, fields.batch_id) == "batches/1"
    assert fields.text(job, fields.input_file_id) == "f-1"
    assert fields.read(job, ("src", "file_name")) == "files/2"
    assert fields.read(job, ("input_files", 3)) is None
    assert fields.read(job, ("src", "missing", "deeper")) is None
    assert fields.read(job, ()) is None
    assert fields.text({"input_files": [""]}, fields.input_file_id) is None


def test_a_plugin_returning_dicts_is_converted_where_the_base_class_receives_them(tmp_path):
    adapter = _DictPlugin()
    adapter.run_id = "r1"
    staged = tmp_path / "c1.jsonl"
    staged.write_bytes(b'{"custom_id":"a"}\n{"custom_id":"b"}\n')
    batch = adapter.submit_staged_chunk("c1", str(staged), BatchProviderConfig())
    assert isinstance(batch, SubmittedBatch)
    assert batch.batch_id == "batch_1" and batch.status == "in_progress"
    assert batch.to_json() == {**RAW, "n": 2} and batch.adoption is None
    found = adapter.found_batch(adapter.find_batch("r1", "c1"))
    assert isinstance(found, FoundBatch) and found.to_json() == RAW
    assert adapter.found_batch(found) is found and adapter.submitted_batch(batch) is batch
    with pytest.raises(TypeError, match="a submission is a SubmittedBatch"):
        adapter.submitted_batch(["batch_1"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a found batch is a FoundBatch"):
        adapter.found_batch("batch_1")  # type: ignore[arg-type]


def test_a_retried_create_of_a_plugin_adopts_the_dict_its_find_batch_returns():
    adapter = _DictPlugin()
    adapter.run_id = "r1"
    adapter.fail_first_create = True
    batch = adapter.submit_chunk("c1", [{"custom_id": "a"}], BatchProviderConfig())
    assert adapter.creates == ["c1"]  # adopted: not created a second time
    assert isinstance(batch, SubmittedBatch) and batch.to_json() == RAW


def test_each_built_in_adapter_names_its_config_class():
    from mmirage_beam.providers.anthropic import AnthropicBatchAdapter
    from mmirage_beam.providers.anthropic.config import AnthropicBatchConfig
    from mmirage_beam.providers.gemini.adapter import GeminiBatchAdapter
    from mmirage_beam.providers.gemini.config import GeminiBatchConfig
    from mmirage_beam.providers.mistral.adapter import MistralBatchAdapter
    from mmirage_beam.providers.mistral.config import MistralBatchConfig
    from mmirage_beam.providers.openai import OpenAIBatchAdapter, OpenAIBatchConfig

    def config_of(adapter_cls: type) -> type:
        (base,) = adapter_cls.__orig_bases__  # type: ignore[attr-defined]
        (config_cls,) = typing.get_args(base)
        return config_cls

    assert config_of(OpenAIBatchAdapter) is OpenAIBatchConfig
    assert config_of(AnthropicBatchAdapter) is AnthropicBatchConfig
    assert config_of(GeminiBatchAdapter) is GeminiBatchConfig
    assert config_of(MistralBatchAdapter) is MistralBatchConfig
    (param,) = BatchSubmissionAdapter.__parameters__
    assert param.__bound__ is BatchProviderConfig


def test_an_adopt_lost_create_of_a_plugin_may_return_the_dict_with_its_adoption():
    adoption = {"method": "created_at+request_count", "confirmed": False}

    class _ByShape(_DictPlugin):
        def adopt_lost_create(self, what: str, chunk_id: str, *args: Any) -> Any:
            return {**RAW, "mmirage_adoption": adoption}

    adapter = _ByShape()
    adapter.fail_first_create = True
    batch = adapter.submit_chunk("c1", [{"custom_id": "a"}], BatchProviderConfig())
    assert isinstance(batch, SubmittedBatch) and batch.adoption == adoption
    assert batch.to_json() == {**RAW, "mmirage_adoption": adoption}
