"""Third-party batch clients, unchanged, against the embedded fake provider (opt-in).

The fakes must be as strict as the providers and never stricter, so the clients people
use for batch jobs run against them as they run against the real services. Every batch
route of these clients that takes a base URL is driven here (the table, with the routes
that take none and the source line saying so, is docs/third-party-clients.md):

- bespokelabs-curator's batch mode (``curator.LLM(..., batch=True)``): the ``openai``
  backend (it uploads raw bytes, which the openai SDK names ``upload``, creates the
  batch, polls it every ``batch_check_interval`` seconds and downloads the answers), the
  same backend on Groq's and Together's OpenAI-compatible base URLs, the ``azure``
  backend (the resource's ``/openai/v1/`` URL, bare ``/chat/completions`` endpoint,
  the deployment as every line's model) and the ``anthropic`` backend;
- litellm's files and batches functions: ``create_file`` (bytes and a named file),
  ``create_batch``, ``retrieve_batch``, ``file_content``, ``cancel_batch`` on its
  ``openai`` route (OpenAI, and Groq, Together and Azure's v1 URL through it), its
  ``azure`` route (``api-key`` and ``?api-version=`` data-plane paths), its ``mistral``
  and ``gemini`` routes (they need ``model=`` on every call to load their provider
  config), its ``bedrock`` route (S3 on a moto server through ``s3_endpoint_url``, the
  Bedrock fake through ``aws_bedrock_control_plane_endpoint``), and ``retrieve_batch``
  and ``file_content`` of an Anthropic message batch.

Only base URLs, keys and cache directories are given to them; nothing of theirs is
patched.

Run it with ``MMIRAGE_PEER_TESTS=1 .ci/peers`` (README, "Development"): that script
makes a virtualenv of its own, installs this package with the ``clients`` extra, then
``pip install --no-deps -r tests/clients-nodeps.txt``, runs this module and then the
official SDKs' tests at setup.py's floors. With ``MMIRAGE_PEER_TESTS=1`` a missing client
fails the module instead of skipping it. Why curator needs ``--no-deps``: curator
0.1.31 pins ``anthropic<0.85``, ``litellm==1.83.7`` (which pins ``openai==2.30.0``,
``tiktoken==0.12.0``, ``jsonschema==4.23.0``, ``pydantic==2.12.5``), ``rich<14``,
``pandas==2.2.2`` and ``mistralai<2``, all against requirements.txt (``anthropic==2.14.0``,
``openai==3.57.0``, ``rich==15.0.0``, ...), so pip cannot resolve it with this package;
it runs unchanged on the versions the extra installs. Its ``instructor<2`` range admits
1.15+, which no longer has the ``instructor.handle_response_model`` curator's Anthropic
batch mode calls, so ``tests/clients-nodeps.txt`` pins 1.14.5 (whose own
``openai<3``/``rich<15`` pins are also skipped by ``--no-deps``). mistralai must not be
installed beside them: instructor imports ``from mistralai import Mistral`` whenever a
``mistralai`` package is importable, and 3.x moved ``Mistral`` to ``mistralai.client``.

Offline: litellm fetches its model cost map from GitHub when imported unless
``LITELLM_LOCAL_MODEL_COST_MAP=True`` (set below, before the import); curator writes a
telemetry id under ``~/.cache/curator`` when imported and sends PostHog events unless
``TELEMETRY_ENABLED=false`` (both read at import: the ``curator`` fixture points ``HOME``
at ``tmp_path`` and disables telemetry before importing it); curator's cache goes to
``CURATOR_CACHE_DIR`` (``tmp_path``) and Hugging Face ``datasets`` is told it is offline.
The models named are ones litellm's bundled cost map knows (curator asks litellm for
their prices and, for Anthropic, their ``max_tokens``).

Wall time about 3 minutes for the 14 tests on one core (curator sleeps 1 s after each upload
and polls at most once a second), plus about 15 s of imports.
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
#: Set by .ci/peers: the clients must be installed, a missing one is a failure.
REQUIRED = os.environ.get("MMIRAGE_PEER_TESTS") == "1"
INSTALL = "MMIRAGE_PEER_TESTS=1 .ci/peers (README, Development)"
if REQUIRED:
    import litellm
else:
    litellm = pytest.importorskip("litellm", reason=f"third-party clients not installed: {INSTALL}")

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
    if REQUIRED:
        import bespokelabs.curator as module
    else:
        module = pytest.importorskip("bespokelabs.curator", reason=f"not installed: {INSTALL}")
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


def test_curator_azure_batch_mode(curator: Any) -> None:
    """Curator's Azure backend (AzureBatchRequestProcessor: the openai SDK on the
    resource's ``/openai/v1/`` base URL, batches created with the bare endpoint
    ``/chat/completions``, every line's ``model`` the deployment) against the fake's
    ``azure-openai`` profile: five answers."""
    with FakeProviderServer(processing_delay_secs=1.5) as fake:
        llm = curator.LLM(
            model_name="gpt-4o-mini",
            backend="azure",
            batch=True,
            backend_params={
                "base_url": fake.base_url_for("azure-openai") + "/",
                "api_key": "azure-key-curator",
                "azure_deployment": "gpt-4o-mini-batch",
                "batch_check_interval": 1,
            },
        )
        answers = _responses(llm(PROMPTS))
        _report("curator/azure", fake, answers)
        assert answers == _expected()
        (batch,) = fake.batches("azure-openai")
        assert batch["status"] == "completed" and batch["request_counts"]["completed"] == 5
        sent = fake.submitted_requests("azure-openai")
        assert {r["request"]["body"]["model"] for r in sent} == {"gpt-4o-mini-batch"}
        assert fake.call_counts()["azure-openai:batches_create"] == 1


@pytest.mark.parametrize("profile", ["groq", "together"])
def test_curator_openai_backend_on_compatible_services(curator: Any, profile: str) -> None:
    """Curator's OpenAI batch backend with ``base_url`` set to an OpenAI-compatible
    batch service (curator has no Groq or Together batch backend: request_processor/
    _factory.py): five answers."""
    with FakeProviderServer(processing_delay_secs=1.5) as fake:
        llm = curator.LLM(
            model_name="gpt-4o-mini",
            backend="openai",
            batch=True,
            backend_params={
                "base_url": fake.base_url_for(profile),
                "api_key": f"{profile}-key-curator",
                "batch_check_interval": 1,
            },
        )
        answers = _responses(llm(PROMPTS))
        _report(f"curator/{profile}", fake, answers)
        assert answers == _expected()
        assert fake.call_counts()[f"{profile}:batches_create"] == 1


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


def _chat_lines(model: str, prefix: str, *, method_url: bool = True) -> bytes:
    """OpenAI-shaped batch lines for PROMPTS, ``custom_id`` ``<prefix><i>``."""
    rows = []
    for i, prompt in enumerate(PROMPTS):
        row: dict[str, Any] = {"custom_id": f"{prefix}{i}"}
        if method_url:
            row.update(method="POST", url=CHAT)
        row["body"] = {"model": model, "messages": [{"role": "user", "content": prompt}]}
        rows.append(json.dumps(row))
    return ("\n".join(rows) + "\n").encode()


def _chat_answers(content: str) -> dict[str, str]:
    lines = [json.loads(row) for row in content.splitlines() if row.strip()]
    return {
        line["custom_id"]: line["response"]["body"]["choices"][0]["message"]["content"]
        for line in lines
    }


@pytest.mark.parametrize("profile", ["groq", "together", "azure-openai"])
def test_litellm_openai_compatible_services(profile: str) -> None:
    """litellm's OpenAI route (``custom_llm_provider="openai"``, the one its docs give for
    OpenAI-compatible servers) pointed at each OpenAI-compatible service's ``/v1`` base
    URL: upload, create, retrieve, collect. litellm has no batch route of its own for
    Groq or Together (``create_batch``'s ``custom_llm_provider`` Literal in
    litellm/batches/main.py); Azure's own route is the next test."""
    model = "gpt-4o-mini-batch" if profile == "azure-openai" else "llama-3.1-8b-instant"
    with FakeProviderServer() as fake:
        kw = {"custom_llm_provider": "openai", "api_base": fake.base_url_for(profile)}
        kw["api_key"] = "sk-test-litellm"
        uploaded = litellm.create_file(file=_chat_lines(model, "c"), purpose="batch", **kw)
        created = litellm.create_batch(
            completion_window="24h", endpoint=CHAT, input_file_id=uploaded.id, **kw
        )
        batch = litellm.retrieve_batch(batch_id=created.id, **kw)
        print(f"\n[litellm/{profile}] retrieve_batch -> {batch.status} {batch.request_counts}")
        assert batch.status == "completed" and batch.request_counts.completed == 5
        answers = _chat_answers(litellm.file_content(file_id=batch.output_file_id, **kw).content)
        assert answers == {f"c{i}": fake_answer_text(p) for i, p in enumerate(PROMPTS)}
        assert fake.call_counts()[f"{profile}:batches_create"] == 1


def test_litellm_azure_files_and_batches() -> None:
    """litellm's Azure route (``custom_llm_provider="azure"``: ``AzureOpenAI`` with
    ``azure_endpoint=api_base``, the ``api-key`` header and ``?api-version=`` on the
    data-plane paths ``/openai/files``, ``/openai/batches``): upload, create with the
    bare endpoint ``/chat/completions`` Azure documents, retrieve, collect, cancel."""
    deployment = "gpt-4o-mini-batch"
    with FakeProviderServer() as fake:
        kw = {"custom_llm_provider": "azure", "api_base": fake.base_url + "/azure"}
        kw.update(api_key="azure-key-litellm", api_version="2024-10-21")
        uploaded = litellm.create_file(file=_chat_lines(deployment, "z"), purpose="batch", **kw)
        created = litellm.create_batch(
            completion_window="24h", endpoint="/chat/completions", input_file_id=uploaded.id, **kw
        )
        batch = litellm.retrieve_batch(batch_id=created.id, **kw)
        print(f"\n[litellm/azure] retrieve_batch -> {batch.status} {batch.request_counts}")
        assert batch.status == "completed" and batch.request_counts.completed == 5
        answers = _chat_answers(litellm.file_content(file_id=batch.output_file_id, **kw).content)
        assert answers == {f"z{i}": fake_answer_text(p) for i, p in enumerate(PROMPTS)}
        fake.script(processing_delay_secs=60)
        slow = litellm.create_batch(
            completion_window="24h", endpoint="/chat/completions", input_file_id=uploaded.id, **kw
        )
        cancelled = litellm.cancel_batch(batch_id=slow.id, **kw)
        print(f"[litellm/azure] cancel_batch {slow.id} -> {cancelled.status}")
        assert cancelled.status in ("cancelling", "cancelled")
        calls = fake.call_counts()
        assert calls["azure-openai:batches_create"] == 2, calls


def test_litellm_mistral_files_and_batches() -> None:
    """litellm's Mistral route (``custom_llm_provider="mistral"``, files and batches
    through its MistralFilesConfig/MistralBatchesConfig, ``api_base`` the server URL):
    upload, create (the model goes on the job), retrieve, collect."""
    model = "mistral-small-latest"
    with FakeProviderServer() as fake:
        kw = {"custom_llm_provider": "mistral", "api_base": fake.mistral_base_url}
        kw.update(api_key="mistral-key-litellm", model=f"mistral/{model}")
        uploaded = litellm.create_file(
            file=_chat_lines(model, "m", method_url=False), purpose="batch", **kw
        )
        created = litellm.create_batch(
            completion_window="24h",
            endpoint=CHAT,
            input_file_id=uploaded.id,
            **kw,
        )
        batch = litellm.retrieve_batch(batch_id=created.id, **kw)
        print(f"\n[litellm/mistral] retrieve_batch -> {batch.status} {batch.request_counts}")
        assert batch.status == "completed" and batch.request_counts.completed == 5
        answers = _chat_answers(litellm.file_content(file_id=batch.output_file_id, **kw).content)
        assert answers == {f"m{i}": fake_answer_text(p) for i, p in enumerate(PROMPTS)}


def test_litellm_gemini_files_and_batches() -> None:
    """litellm's Gemini route (``custom_llm_provider="gemini"``: GoogleAIStudioFilesHandler
    and GeminiBatchesConfig, ``api_base`` the API root, ``x-goog-api-key``): upload the
    Gemini API's own JSONL (``{"key", "request"}`` lines, the batch guide's file format),
    create ``models/<m>:batchGenerateContent`` from it, retrieve, collect."""
    model = "gemini-2.5-flash"
    rows = [
        {"key": f"g{i}", "request": {"contents": [{"role": "user", "parts": [{"text": p}]}]}}
        for i, p in enumerate(PROMPTS)
    ]
    data = ("\n".join(json.dumps(r) for r in rows) + "\n").encode()
    with FakeProviderServer() as fake:
        kw = {"custom_llm_provider": "gemini", "api_base": fake.gemini_base_url}
        kw.update(api_key="gemini-key-litellm", model=f"gemini/{model}")
        uploaded = litellm.create_file(file=data, purpose="batch", **kw)
        created = litellm.create_batch(
            completion_window="24h",
            endpoint=CHAT,
            input_file_id=uploaded.id,
            **kw,
        )
        batch = litellm.retrieve_batch(batch_id=created.id, **kw)
        print(f"\n[litellm/gemini] retrieve_batch -> {batch.status} {batch.request_counts}")
        assert batch.status == "completed"
        content = litellm.file_content(file_id=batch.output_file_id, **kw).content
        lines = [json.loads(row) for row in content.splitlines() if row.strip()]
        answers = {
            line["key"]: line["response"]["candidates"][0]["content"]["parts"][0]["text"]
            for line in lines
        }
        assert answers == {f"g{i}": fake_answer_text(p) for i, p in enumerate(PROMPTS)}


def test_litellm_bedrock_files_and_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """litellm's Bedrock route (``custom_llm_provider="bedrock"``): ``create_file`` puts
    the OpenAI-shaped lines, turned into Bedrock records, on S3 (``s3_endpoint_url``: a
    moto server), ``create_batch`` calls CreateModelInvocationJob on
    ``aws_bedrock_control_plane_endpoint`` (the Bedrock fake), ``retrieve_batch`` and
    ``file_content`` read the job and its output back. 100 records: Bedrock's minimum."""
    from tests.storage_servers import REGION, S3Server, skip_unless_moto

    skip_unless_moto()
    model = "anthropic.claude-3-5-haiku-20241022-v1:0"
    prompts = [f"What is {i} plus {i}?" for i in range(100)]
    rows = [
        {
            "custom_id": f"b{i}",
            "method": "POST",
            "url": CHAT,
            "body": {
                "model": model,
                "max_tokens": 32,
                "messages": [{"role": "user", "content": p}],
            },
        }
        for i, p in enumerate(prompts)
    ]
    data = ("\n".join(json.dumps(r) for r in rows) + "\n").encode()
    with S3Server(tmp_path / "moto") as s3, FakeProviderServer() as fake:
        for key, value in s3.endpoint_env.items():  # the fake writes the output with them
            monkeypatch.setenv(key, value)
        kw: dict[str, Any] = {
            "custom_llm_provider": "bedrock",
            "model": f"bedrock/{model}",
            "aws_region_name": REGION,
            "aws_access_key_id": s3.env["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": s3.env["AWS_SECRET_ACCESS_KEY"],
            "s3_bucket_name": s3.bucket,
            "s3_endpoint_url": s3.endpoint,
            "aws_bedrock_control_plane_endpoint": fake.base_url,
        }
        uploaded = litellm.create_file(file=data, purpose="batch", **kw)
        print(f"\n[litellm/bedrock] create_file -> {uploaded.id}")
        created = litellm.create_batch(
            completion_window="24h",
            endpoint=CHAT,
            input_file_id=uploaded.id,
            aws_batch_role_arn="arn:aws:iam::123456789012:role/mmirage-batch",
            **kw,
        )
        batch = litellm.retrieve_batch(batch_id=created.id, **kw)
        print(f"[litellm/bedrock] retrieve_batch -> {batch.status} {batch.request_counts}")
        assert batch.status == "completed"
        content = litellm.file_content(file_id=batch.output_file_id, **kw).content
        lines = [json.loads(row) for row in content.splitlines() if row.strip()]
        answers = {line["recordId"]: line["modelOutput"]["content"][0]["text"] for line in lines}
        print(f"[litellm/bedrock] file_content b0: {answers.get('b0')}")
        assert answers == {f"b{i}": fake_answer_text(p) for i, p in enumerate(prompts)}
        assert fake.call_counts()["bedrock_create_job"] == 1
