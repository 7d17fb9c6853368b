"""The typed provider results (mmirage_beam/records.py): every shape the adapters emit
round-trips through to_json / from_json as today's neutral dict, plugins' dicts are
accepted, and Beam encodes the records (RowCoder, deterministic) through a real
pipeline."""

import json

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from mmirage_beam.jsonl import RawLine
from mmirage_beam.providers.anthropic.adapter import normalise_result
from mmirage_beam.providers.gemini.adapter import normalise_result_line as gemini_line
from mmirage_beam.providers.mistral.outcomes import normalise_result_line as mistral_line
from mmirage_beam.providers.openai.adapter import normalise_result_line as openai_line
from mmirage_beam.records import (
    ChangedRow,
    ChunkRequestLine,
    ExpectedRequest,
    ProviderResult,
    ResultError,
    provider_result,
)
from mmirage_beam.results import result_from_line
from mmirage_beam.transforms.fetch import error_record, outcome_error


def _chat(content, finish="stop", **message):
    body = {
        "choices": [{"message": {"content": content, **message}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7},
    }
    return {"custom_id": "c1", "response": {"status_code": 200, "body": body}}


def _claude(text, stop="end_turn", **usage):
    return {
        "custom_id": "c1",
        "result": {
            "type": "succeeded",
            "message": {
                "content": [{"type": "text", "text": text}],
                "stop_reason": stop,
                "usage": {"input_tokens": 5, "output_tokens": 3, **usage},
            },
        },
    }


def _raw(data: bytes) -> RawLine:
    return RawLine(3, 100, data, len(data) + 1)


#: (what, the adapter's result, today's neutral dict, key order included)
SHAPES = [
    (
        "openai success",
        openai_line(_chat("42")),
        {"custom_id": "c1", "generated_text": "42", "input_tokens": 11, "output_tokens": 7},
    ),
    (
        "openai refusal (raw_text)",
        openai_line(_chat(None, refusal="no")),
        {
            "custom_id": "c1",
            "error": {
                "type": "refusal",
                "message": "the model refused: no",
                "status_code": 200,
                "raw_text": "no",
            },
            "input_tokens": 11,
            "output_tokens": 7,
        },
    ),
    (
        "openai empty (no raw_text)",
        openai_line(_chat("")),
        {
            "custom_id": "c1",
            "error": {
                "type": "empty",
                "message": "the answer is empty (finish_reason: stop)",
                "status_code": 200,
            },
            "input_tokens": 11,
            "output_tokens": 7,
        },
    ),
    (
        "openai 400 with code and param",
        openai_line(
            {
                "custom_id": "c1",
                "response": {
                    "status_code": 400,
                    "body": {
                        "error": {
                            "message": "bad",
                            "type": "invalid_request_error",
                            "param": "temperature",
                            "code": "invalid_value",
                        }
                    },
                },
            }
        ),
        {
            "custom_id": "c1",
            "error": {
                "type": "invalid_request_error",
                "message": "bad",
                "status_code": 400,
                "code": "invalid_value",
                "param": "temperature",
            },
        },
    ),
    (
        "anthropic success with cache tokens",
        normalise_result(_claude("hi", cache_read_input_tokens=900)),
        {
            "custom_id": "c1",
            "generated_text": "hi",
            "input_tokens": 5,
            "output_tokens": 3,
            "cache_read_input_tokens": 900,
        },
    ),
    (
        "anthropic expired",
        normalise_result({"custom_id": "c1", "result": {"type": "expired"}}),
        {
            "custom_id": "c1",
            "error": {
                "type": "expired",
                "message": "the batch expired (24 h) before this request ran",
                "status_code": None,
            },
        },
    ),
    (
        "gemini rpc error",
        gemini_line({"key": "k", "error": {"code": 500, "message": "boom", "status": "INTERNAL"}}),
        {
            "custom_id": "k",
            "error": {"type": "server_error", "message": "INTERNAL: boom", "status_code": 500},
        },
    ),
    (
        "mistral truncated",
        mistral_line(_chat("half", finish="length")),
        {
            "custom_id": "c1",
            "error": {
                "type": "truncated",
                "message": "the answer was cut at the token limit (finish_reason: length)",
                "status_code": 200,
                "raw_text": "half",
            },
            "input_tokens": 11,
            "output_tokens": 7,
        },
    ),
    (
        "damaged line, custom_id lost",
        result_from_line(_raw(b"\xff not json"), openai_line, "output file f"),
        {
            "custom_id": None,
            "error": {
                "type": "malformed_response",
                "message": "line 3 (byte offset 100) of the output file f is not valid UTF-8 "
                "(byte offset 100)",
                "status_code": None,
            },
            "line": 3,
            "offset": 100,
        },
    ),
    (
        "line cut short, custom_id recovered",
        result_from_line(_raw(b'{"custom_id": "c7", "resp'), openai_line, "output file f"),
        {
            "custom_id": "c7",
            "error": {
                "type": "malformed_response",
                "message": "line 3 (byte offset 100) of the output file f is not valid JSON "
                "(cut short?): Unterminated string starting at at column 21",
                "status_code": None,
            },
            "line": 3,
            "offset": 100,
        },
    ),
]


@pytest.mark.parametrize("what,result,expected", SHAPES, ids=[s[0] for s in SHAPES])
def test_every_adapter_shape_round_trips_as_todays_dict(what, result, expected):
    assert isinstance(result, ProviderResult), what
    got = result.to_json()
    assert got == expected
    # the same keys in the same order: the dict is what plugins and older code saw
    assert json.dumps(got) == json.dumps(expected)
    assert ProviderResult.from_json(got) == result
    assert ProviderResult.from_json(json.loads(json.dumps(got))) == result


def test_records_are_frozen():
    r = ProviderResult("c1", generated_text="x")
    with pytest.raises(AttributeError):
        r.custom_id = "c2"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        ResultError("t", "m").type = "u"  # type: ignore[misc]


def test_a_plugins_dicts_are_accepted_at_the_boundary():
    """A plugin normaliser returning today's dict: results_from_lines reads it as a
    record (and still prefixes a malformed one's message with where it is)."""

    def plugin_normaliser(value):
        if value.get("bad"):
            return {"custom_id": value["id"], "error": {"type": "malformed_response"}}
        return {"custom_id": value["id"], "generated_text": value["text"], "extra": 1}

    ok = result_from_line(_raw(b'{"id": "p1", "text": "t"}'), plugin_normaliser, "file f")
    assert ok == ProviderResult("p1", generated_text="t")
    bad = result_from_line(_raw(b'{"id": "p2", "bad": true}'), plugin_normaliser, "file f")
    assert bad.error == ResultError(
        "malformed_response", "line 3 (byte offset 100) of the file f", None
    )
    assert (bad.line, bad.offset) == (3, 100)
    assert provider_result(ok) is ok
    with pytest.raises(TypeError, match="not list"):
        provider_result([])


def test_outcome_errors_keep_the_merged_rows_shape():
    """The error merged rows and OUT.errors.jsonl carry: type, message, status_code,
    retryable, then raw_text / code / param when set."""
    err = ResultError("rate_limit_exceeded", "slow", 429, None, "c", "p")
    assert json.dumps(outcome_error(err)) == json.dumps(
        {
            "type": "rate_limit_exceeded",
            "message": "slow",
            "status_code": 429,
            "retryable": True,
            "code": "c",
            "param": "p",
        }
    )
    assert error_record("refusal", "no", 200, "no") == {
        "type": "refusal",
        "message": "no",
        "status_code": 200,
        "retryable": False,
        "raw_text": "no",
    }


def test_coders_are_deterministic_row_coders():
    for record in (ProviderResult, ResultError, ExpectedRequest, ChunkRequestLine, ChangedRow):
        coder = beam.coders.registry.get_coder(record)
        assert isinstance(coder, beam.coders.RowCoder), record
        assert coder.is_deterministic(), record
    coder = beam.coders.registry.get_coder(ProviderResult)
    for _what, result, _expected in SHAPES:
        encoded = coder.encode(result)
        assert coder.decode(encoded) == result
        assert type(coder.decode(encoded).error) is type(result.error)
        assert coder.encode(coder.decode(encoded)) == encoded  # same bytes each time


def test_records_cross_a_group_by_key_in_a_real_pipeline():
    """ProviderResults as GroupByKey keys and values, through the registered RowCoder."""
    results = [r for _what, r, _e in SHAPES]
    with TestPipeline() as p:
        grouped = (
            p
            | beam.Create(results).with_output_types(ProviderResult)
            | beam.Map(lambda r: (r, r.custom_id)).with_output_types(
                beam.typehints.Tuple[ProviderResult, beam.typehints.Optional[str]]
            )
            | beam.GroupByKey()
            | beam.MapTuple(lambda r, ids: (r.to_json(), sorted(ids, key=str)))
        )
        assert_that(
            grouped,
            equal_to([(r.to_json(), [r.custom_id]) for r in results]),
            label="ByResult",
        )
        lines = (
            p
            | "Lines"
            >> beam.Create(
                [
                    ("k", ChunkRequestLine(0, 7, "h", b"x\n")),
                    ("k", ChunkRequestLine(1, 8, "h", None)),
                ]
            )
            | "GroupLines" >> beam.GroupByKey()
            | beam.MapTuple(lambda k, v: (k, sorted(v)))
        )
        assert_that(
            lines,
            equal_to(
                [("k", [ChunkRequestLine(0, 7, "h", b"x\n"), ChunkRequestLine(1, 8, "h", None)])]
            ),
            label="ChunkLines",
        )
