"""Every provider result line classified on its own: normalisers on crafted lines, the
line splitter, and the streamed, retried download (real SDKs against the fake)."""

from __future__ import annotations

import json

import pytest

from mmirage_beam.jsonl import iter_raw_lines
from mmirage_beam.providers.anthropic.adapter import normalise_result
from mmirage_beam.providers.openai.adapter import normalise_result_line
from mmirage_beam.results import is_retryable, recover_custom_id, results_from_lines


def _chat(content, finish="stop", refusal=None, status=200, **body):
    b = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": refusal},
                "finish_reason": finish,
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }
    b.update(body)
    return {"id": "br", "custom_id": "c1", "response": {"status_code": status, "body": b}}


def _msg(text, stop="end_turn"):
    return {
        "custom_id": "c1",
        "result": {
            "type": "succeeded",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [{"type": "text", "text": text}] if text is not None else [],
                "stop_reason": stop,
                "usage": {"input_tokens": 5, "output_tokens": 3},
            },
        },
    }


def test_openai_success_and_typed_outcomes():
    ok = normalise_result_line(_chat("42")).to_json()
    assert ok == {"custom_id": "c1", "generated_text": "42", "input_tokens": 11, "output_tokens": 7}
    cases = {
        "refusal": _chat(None, refusal="I can't help with that."),
        "truncated": _chat('{"numbers": [1, 2', finish="length"),
        "content_filter": _chat("", finish="content_filter"),
        "empty": _chat(""),
    }
    for kind, line in cases.items():
        r = normalise_result_line(line).to_json()
        assert r["error"]["type"] == kind, (kind, r)
        assert r["input_tokens"] == 11 and r["output_tokens"] == 7  # still billed
        assert "generated_text" not in r
    assert (
        normalise_result_line(cases["refusal"]).to_json()["error"]["raw_text"]
        == "I can't help with that."
    )
    assert (
        normalise_result_line(cases["truncated"]).to_json()["error"]["raw_text"]
        == '{"numbers": [1, 2'
    )


def test_openai_200_without_a_real_answer_is_malformed():
    error_body = {
        "custom_id": "c1",
        "response": {"status_code": 200, "body": {"error": {"message": "boom", "type": "x"}}},
    }
    for line in (
        error_body,
        {"custom_id": "c1", "response": {"status_code": 200, "body": {}}},
        {"custom_id": "c1", "response": {"status_code": 200, "body": None}},
        {"custom_id": "c1", "response": {"status_code": 200, "body": {"choices": []}}},
    ):
        r = normalise_result_line(line).to_json()
        assert r["error"]["type"] == "malformed_response", line
        assert is_retryable(r["error"])
    assert "boom" in normalise_result_line(error_body).to_json()["error"]["message"]


def test_anthropic_typed_outcomes():
    assert normalise_result(_msg("hi")).to_json() == {
        "custom_id": "c1",
        "generated_text": "hi",
        "input_tokens": 5,
        "output_tokens": 3,
    }
    for kind, line in {
        "refusal": _msg("I won't.", stop="refusal"),
        "truncated": _msg('{"a": ', stop="max_tokens"),
        "empty": _msg(None),
    }.items():
        r = normalise_result(line).to_json()
        assert r["error"]["type"] == kind and r["input_tokens"] == 5
    no_message = {"custom_id": "c1", "result": {"type": "succeeded"}}
    assert normalise_result(no_message).to_json()["error"]["type"] == "malformed_response"


def test_retryability_per_type():
    kinds = {"malformed_response": True, "empty": True}
    kinds.update(refusal=False, truncated=False, content_filter=False)
    for kind, want in kinds.items():
        assert is_retryable({"type": kind, "status_code": 200}) is want, kind


def test_splitter_splits_on_newline_only_and_tracks_offsets():
    text = '{"m": "a\u2028b\u2029c\u0085d"}\n\n{"x": 1}\r\n{"cut": '
    data = text.encode("utf-8")
    blocks = [data[i : i + 3] for i in range(0, len(data), 3)]  # blocks split mid-char
    lines = list(iter_raw_lines(blocks))
    assert [ln.number for ln in lines] == [1, 2, 3, 4]
    assert json.loads(lines[0].data)["m"] == "a\u2028b\u2029c\u0085d"
    assert lines[2].data == b'{"x": 1}'
    for ln in lines:
        assert data[ln.offset : ln.offset + len(ln.data)] == ln.data


def test_each_line_on_its_own():
    good = json.dumps(_chat("fine")).encode()
    other = json.dumps({**_chat("also fine"), "custom_id": "c9"}).encode()
    data = b"\n".join(
        [
            good,
            b'{"custom_id": "c2", "response": {"status_code": 200, "bo',  # cut short
            b'{"custom_id": "c3", "response": "\xff\xfe"}',  # not UTF-8
            b"this is not json at all",  # nothing to recover
            json.dumps({"custom_id": "c4", "response": [1]}).encode(),  # wrong shape
            json.dumps([1, 2]).encode(),
            other,
        ]
    )
    results = results_from_lines(iter_raw_lines([data]), normalise_result_line, "output file f")
    out = [r.to_json() for r in results]
    assert [r["custom_id"] for r in out] == ["c1", "c2", "c3", None, "c4", None, "c9"]
    assert out[0]["generated_text"] == "fine" and out[-1]["generated_text"] == "also fine"
    for r in out[1:6]:
        assert r["error"]["type"] == "malformed_response"
        assert f"line {r['line']} (byte offset {r['offset']})" in r["error"]["message"]
    assert "cut short" in out[1]["error"]["message"]
    assert "UTF-8" in out[2]["error"]["message"]
    assert out[3]["line"] == 4 and out[3]["offset"] == data.index(b"this is not")


def test_recover_custom_id():
    assert recover_custom_id(b'{"custom_id":"r1-0007","response":{"stat') == "r1-0007"
    assert recover_custom_id(b'{"custom_id": "a\\"b", "x"') == 'a"b'
    assert recover_custom_id(b"garbage") is None


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_download_is_streamed_and_resumed_after_a_cut(provider, monkeypatch):
    """A download that fails half-way is retried; lines already read are not repeated."""
    from mmirage_beam.jsonl import RawLine
    from mmirage_beam.providers.base import BatchAdapterRegistry

    cls = BatchAdapterRegistry.get(provider)
    adapter = cls({"api_key": "k"})
    # monkeypatch restores the class as it was (no attribute left shadowing the base's)
    monkeypatch.setattr(type(adapter), "RETRY_SLEEP", staticmethod(lambda s: None))
    data = b"".join(b'{"n": %d}\n' % i for i in range(50))
    opened = []

    class Cut(ConnectionError):
        pass

    import contextlib

    @contextlib.contextmanager
    def open_stream():
        opened.append(1)

        def blocks():
            for i in range(0, len(data), 7):
                if len(opened) == 1 and i > len(data) // 2:
                    raise Cut("connection reset")
                yield data[i : i + 7]

        yield blocks()

    lines = list(adapter.stream_lines_with_retries("download", open_stream))
    assert len(opened) == 2
    assert [json.loads(ln.data)["n"] for ln in lines] == list(range(50))
    assert all(isinstance(ln, RawLine) for ln in lines)
    assert [ln.offset for ln in lines] == [data.index(b'{"n": %d}' % i) for i in range(50)]


def test_download_that_never_opens_gives_up_after_the_policy(monkeypatch):
    import contextlib

    from mmirage_beam.providers.base import BatchAdapterRegistry
    from mmirage_beam.providers.retrying import ProviderRetriesExhausted

    cls = BatchAdapterRegistry.get("openai")
    adapter = cls({"api_key": "k"})
    opened = []

    @contextlib.contextmanager
    def open_stream():
        opened.append(1)
        raise ConnectionError("refused")
        yield  # pragma: no cover

    monkeypatch.setattr(type(adapter), "RETRY_SLEEP", staticmethod(lambda s: None))
    with pytest.raises(ProviderRetriesExhausted, match="failed after 6 attempts"):
        list(adapter.stream_lines_with_retries("download f", open_stream))
    assert len(opened) == 6
