"""Third-party batch clients, unchanged, against the embedded fake provider (opt-in).

The fakes must be as strict as the providers and never stricter, so the clients people
use for batch jobs run against them as they run against the real services:

- bespokelabs-curator's batch mode (``curator.LLM(..., batch=True)``) for OpenAI and for
  Anthropic: it uploads its requests as raw bytes (``files.create(file=<bytes>)``, which
  the openai SDK names ``upload``), creates the batch, polls it every
  ``batch_check_interval`` seconds and downloads the answers;
- litellm's files and batches functions: ``create_file`` with bytes and with a named
  file, ``create_batch``, ``retrieve_batch``, ``file_content``, ``cancel_batch`` (OpenAI),
  and ``retrieve_batch`` and ``file_content`` of an Anthropic message batch.

Only base URLs, keys and cache directories are given to them; nothing of theirs is
patched. The fake only serves OpenAI and Anthropic, so the Gemini and Mistral batch
modes of these clients are not driven here.

Install (its own virtualenv: the pins below move shared packages)::

    pip install -e '.[test,clients]'
    pip install --no-deps -r tests/clients-nodeps.txt

and run ``python -m pytest tests/providers/test_third_party_clients.py -q -n 0 -s`` (``-s`` prints
what each client submitted, how often it polled and what it collected). Without the
``clients`` extra the whole module is skipped; without the second step the curator
tests are. Why curator needs ``--no-deps``: curator 0.1.31 pins ``anthropic<0.85``,
``litellm==1.83.7`` (which pins ``openai==2.30.0``, ``tiktoken==0.12.0``,
``jsonschema==4.23.0``, ``pydantic==2.12.5``), ``rich<14`` and ``pandas==2.2.2``, all
against requirements.txt (``anthropic==2.14.0``, ``openai==3.57.0``, ``rich==15.0.0``,
...), so pip cannot resolve it with this package; it runs unchanged on the versions the
extra installs. Its ``instructor<2`` range admits 1.15+, which no longer has the
``instructor.handle_response_model`` curator's Anthropic batch mode calls, so
``tests/clients-nodeps.txt`` pins 1.14.5 (whose own ``openai<3``/``rich<15`` pins are also
skipped by ``--no-deps``).

Offline: litellm fetches its model cost map from GitHub when imported unless
``LITELLM_LOCAL_MODEL_COST_MAP=True`` (set below, before the import); curator writes a
telemetry id under ``~/.cache/curator`` when imported and sends PostHog events unless
``TELEMETRY_ENABLED=false`` (both read at import: the ``curator`` fixture points ``HOME``
at ``tmp_path`` and disables telemetry before importing it); curator's cache goes to
``CURATOR_CACHE_DIR`` (``tmp_path``) and Hugging Face ``datasets`` is told it is offline.
The models named are ones litellm's bundled cost map knows (curator asks litellm for
their prices and, for Anthropic, their ``max_tokens``).

Wall time about 30 s for the four tests, plus about 15 s of imports (curator sleeps 1 s
after each upload and polls at most once a second).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import openai
import pytest

from mmirage_beam.testing import FakeProviderServer, fake_answer_text

# litellm reads this when it is imported (its model cost map, else fetched from GitHub).
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
litellm = pytest.importorskip(
    "litellm",
    reason="third-party clients not installed: pip install -e '.[test,clients]' && "
    "pip install --no-deps -r tests/clients-nodeps.txt",
)

CHAT = "/v1/chat/completions"
PROMPTS = [f"What is {i} plus {i}?" for i in range(5)]


@pytest.fixture
def curator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``bespokelabs.curator``, imported offline with its cache and telemetry id under
    ``tmp_path`` and telemetry off (curator reads both settings at import)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CURATOR_CACHE_DIR", str(tmp_path / "curator-cache"))
    monkeypatch.setenv("TELEMETRY_ENABLED", "false")
    monkeypatch.setenv("CURATOR_DISABLE_RICH_DISPLAY", "1")
    monkeypatch.setenv("CURATOR_VIEWER", "0")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    module = pytest.importorskip(
        "bespokelabs.curator",
        reason="curator not installed: pip install --no-deps -r tests/clients-nodeps.txt",
    )
    from bespokelabs.curator.telemetry.client import telemetry_client

    assert not telemetry_client.config.enabled, "curator telemetry was enabled at import"
    return module


def _responses(result: Any) -> list[str]:
    dataset = getattr(result, "dataset", result)
    return sorted(row["response"] for row in dataset)


def _expected() -> list[str]:
    return sorted(fake_answer_text(prompt) for prompt in PROMPTS)


def _report(client: str, fake: FakeProviderServer, answers: list[str]) -> None:
    calls = fake.call_counts()
    print(f"\n[{client}] calls to the fake: {json.dumps(calls, sort_keys=True)}")
    for batch in fake.batches():
        status = batch.get("status") or batch.get("processing_status")
        print(f"[{client}] batch {batch['id']}: {status}, counts {batch['request_counts']}")
    for answer in answers:
        print(f"[{client}] answer: {answer}")


def test_curator_openai_batch_mode(curator: Any) -> None:
    """Curator uploads raw bytes (the SDK names them ``upload``), creates the batch,
    polls until it has completed and collects all five answers."""
    with FakeProviderServer(processing_delay_secs=1.5) as fake:
        llm = curator.LLM(
            model_name="gpt-4o-mini",
            backend="openai",
            batch=True,
            backend_params={
                "base_url": fake.openai_base_url,
                "api_key": "sk-test-curator",
                "batch_check_interval": 1,
            },
        )
        answers = _responses(llm(PROMPTS))
        _report("curator/openai", fake, answers)
        assert answers == _expected()
        oa = openai.OpenAI(api_key="sk-test", base_url=fake.openai_base_url)
        uploads = [f for f in oa.files.list(purpose="batch").data]
        assert [f.filename for f in uploads] == ["upload"]
        (batch,) = fake.batches("openai")
        assert batch["status"] == "completed" and batch["request_counts"]["completed"] == 5
        sent = fake.submitted_requests("openai")
        assert sorted(r["custom_id"] for r in sent) == [str(i) for i in range(5)]
        calls = fake.call_counts()
        assert calls["batches_create"] == 1 and calls["batches_retrieve"] >= 2
        assert calls["files_content"] >= 1


def test_curator_anthropic_batch_mode(curator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Curator's Anthropic batch mode (it takes the key from ANTHROPIC_API_KEY) creates
    the message batch, polls until it has ended and collects all five answers."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-curator")
    with FakeProviderServer(processing_delay_secs=1.5) as fake:
        llm = curator.LLM(
            model_name="claude-haiku-4-5",
            backend="anthropic",
            batch=True,
            backend_params={"base_url": fake.anthropic_base_url, "batch_check_interval": 1},
        )
        answers = _responses(llm(PROMPTS))
        _report("curator/anthropic", fake, answers)
        assert answers == _expected()
        (batch,) = fake.batches("anthropic")
        assert batch["processing_status"] == "ended"
        assert batch["request_counts"]["succeeded"] == 5
        sent = fake.submitted_requests("anthropic")
        assert sorted(r["custom_id"] for r in sent) == [str(i) for i in range(5)]
        calls = fake.call_counts()
        assert calls["messages_batches_create"] == 1
        assert calls["messages_batches_retrieve"] >= 2 and calls["messages_batches_results"] >= 1


def _line(custom_id: str, prompt: str) -> dict[str, Any]:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]}
    return {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body}


def test_litellm_files_and_batches(tmp_path: Path) -> None:
    """litellm's ``create_file`` (bytes, and a named file), ``create_batch``,
    ``retrieve_batch``, ``file_content`` and ``cancel_batch`` against the fake."""
    data = b"".join(
        json.dumps(_line(f"q{i}", prompt)).encode() + b"\n" for i, prompt in enumerate(PROMPTS)
    )
    named = tmp_path / "requests.jsonl"
    named.write_bytes(data)
    with FakeProviderServer() as fake:
        kw = {"custom_llm_provider": "openai", "api_base": fake.openai_base_url}
        kw["api_key"] = "sk-test-litellm"
        raw = litellm.create_file(file=data, purpose="batch", **kw)
        with named.open("rb") as handle:
            from_file = litellm.create_file(file=handle, purpose="batch", **kw)
        print(f"\n[litellm] create_file(bytes) -> {raw.id} {raw.filename!r} {raw.bytes} B")
        print(f"[litellm] create_file(file) -> {from_file.id} {from_file.filename!r}")
        assert (raw.filename, raw.bytes) == ("upload", len(data))
        assert from_file.filename == "requests.jsonl"

        created = litellm.create_batch(
            completion_window="24h",
            endpoint=CHAT,
            input_file_id=raw.id,
            metadata={"client": "litellm"},
            **kw,
        )
        print(f"[litellm] create_batch -> {created.id} {created.status}")
        batch = litellm.retrieve_batch(batch_id=created.id, **kw)
        print(f"[litellm] retrieve_batch -> {batch.status} {batch.request_counts}")
        assert batch.status == "completed" and batch.request_counts.completed == 5
        assert batch.metadata == {"client": "litellm"}
        content = litellm.file_content(file_id=batch.output_file_id, **kw)
        lines = [json.loads(row) for row in content.content.splitlines()]
        answers = {
            line["custom_id"]: line["response"]["body"]["choices"][0]["message"]["content"]
            for line in lines
        }
        for custom_id in sorted(answers):
            print(f"[litellm] file_content {custom_id}: {answers[custom_id]}")
        assert answers == {f"q{i}": fake_answer_text(p) for i, p in enumerate(PROMPTS)}

        fake.script(processing_delay_secs=60)
        slow = litellm.create_batch(
            completion_window="24h", endpoint=CHAT, input_file_id=from_file.id, **kw
        )
        cancelled = litellm.cancel_batch(batch_id=slow.id, **kw)
        print(f"[litellm] cancel_batch {slow.id} -> {cancelled.status}")
        assert cancelled.status == "cancelling"
        assert litellm.retrieve_batch(batch_id=slow.id, **kw).cancelling_at is not None


def test_litellm_reads_an_anthropic_message_batch() -> None:
    """litellm's ``retrieve_batch`` and ``file_content`` for Anthropic (litellm 1.110
    has no Anthropic ``create_batch`` from an OpenAI-shaped file nor ``cancel_batch``, so
    the batch is created with the official anthropic SDK)."""
    import anthropic

    with FakeProviderServer() as fake:
        an = anthropic.Anthropic(api_key="sk-ant-test", base_url=fake.anthropic_base_url)
        params = {"model": "claude-haiku-4-5", "max_tokens": 32}
        created = an.messages.batches.create(
            requests=[
                {"custom_id": f"a{i}", "params": {**params, "messages": [msg]}}
                for i, msg in enumerate({"role": "user", "content": p} for p in PROMPTS)
            ]
        )
        kw = {"custom_llm_provider": "anthropic", "api_base": fake.anthropic_base_url}
        kw["api_key"] = "sk-ant-test-litellm"
        batch = litellm.retrieve_batch(batch_id=created.id, **kw)
        print(f"\n[litellm/anthropic] retrieve_batch -> {batch.status} {batch.request_counts}")
        assert batch.status == "completed" and batch.request_counts.completed == 5
        content = litellm.file_content(file_id=batch.output_file_id, **kw)
        lines = [json.loads(row) for row in content.content.splitlines()]
        answers = {
            line["custom_id"]: line["result"]["message"]["content"][0]["text"] for line in lines
        }
        for custom_id in sorted(answers):
            print(f"[litellm/anthropic] file_content {custom_id}: {answers[custom_id]}")
        assert answers == {f"a{i}": fake_answer_text(p) for i, p in enumerate(PROMPTS)}
