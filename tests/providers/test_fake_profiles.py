"""The OpenAI-compatible profiles (``azure-openai``, ``groq``, ``together``) against the
fake's emulation of each service (``mmirage_beam/providers/openai/fake_profiles.py``,
rules and sources in ``tests/spec/README.md``): a run -> check -> merge of 20 GSM8K rows
per profile through the CLI drivers in-process, and each refusal through the openai SDK
at the profile's base URL."""

from __future__ import annotations

import json

import openai
import pytest

from mmirage_beam.providers.openai import fake_profiles as profiles
from mmirage_beam.providers.openai import profiles as adapter_profiles
from pipelines.check import main as check_main
from pipelines.merge import main as merge_main
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, base_config, write_config

ROWS = 20
CHAT = "/v1/chat/completions"
KEYS = {
    "azure-openai": "AZURE_OPENAI_API_KEY",
    "groq": "GROQ_API_KEY",
    "together": "TOGETHER_API_KEY",
}


def _client(fake, profile: str, **headers: str) -> openai.OpenAI:
    """An openai SDK client at the profile's base URL (Azure: with the api-key header)."""
    if profile == "azure-openai":
        headers.setdefault("api-key", "azure-key")
    return openai.OpenAI(
        api_key="k", base_url=fake.base_url_for(profile), default_headers=headers, max_retries=0
    )


def _line(custom_id: str, model: str = "dep", together: bool = False) -> dict:
    line = {
        "custom_id": custom_id,
        "body": {"model": model, "messages": [{"role": "user", "content": f"say {custom_id}"}]},
    }
    if not together:
        line.update(method="POST", url=CHAT)
    return line


def _batch(client: openai.OpenAI, lines: list[dict], window: str = "24h"):
    data = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
    uploaded = client.files.create(file=("in.jsonl", data), purpose="batch")
    created = client.batches.create(
        input_file_id=uploaded.id, endpoint=CHAT, completion_window=window
    )
    return client.batches.retrieve(created.id)


@pytest.mark.parametrize("provider", ["azure-openai", "groq", "together"])
def test_profile_run_check_merge_against_its_fake(
    tmp_path, capsys, monkeypatch, fake_provider, provider
):
    fake = fake_provider
    monkeypatch.setenv(KEYS[provider], f"{provider}-test-key")
    extra = {"completion_window": "72h"} if provider == "groq" else {}
    model = {"azure-openai": "my-deployment", "groq": "llama-3.1-8b-instant"}.get(
        provider, "meta-llama/Llama-3.3-70B-Instruct-Turbo"
    )
    cfg = base_config(
        tmp_path, provider, base_url=fake.base_url_for(provider), model=model, **extra
    )
    rows = GSM8K_JSONL.read_text(encoding="utf-8").split("\n")[:ROWS]
    source = tmp_path / "rows.jsonl"
    source.write_text("\n".join(rows) + "\n", encoding="utf-8")
    cfg["loading_params"]["datasets"][0]["path"] = str(source)
    path = write_config(tmp_path, cfg)
    assert submit_main(["--config", path, "--run-id", "p1"]) == 0
    assert "price unknown" in capsys.readouterr().out.lower()
    sent = fake.submitted_requests(provider)
    assert len(sent) == ROWS and fake.submitted_requests("openai") == []
    assert {r["request"]["body"]["model"] for r in sent} == {model}
    shapes = {frozenset(r["request"]) for r in sent}
    if provider == "together":
        assert shapes == {frozenset({"custom_id", "body"})}
    else:
        assert shapes == {frozenset({"custom_id", "method", "url", "body"})}
    [job] = fake.batches(provider)
    assert job["completion_window"] == extra.get("completion_window", "24h")
    assert fake.call_counts().get(f"{provider}:batches_create") == 1
    assert check_main(["--config", path]) == 0
    out = tmp_path / "merged.jsonl"
    assert merge_main(["--config", path, "--output-path", str(out)]) == 0
    merged = [json.loads(x) for x in out.read_text(encoding="utf-8").split("\n") if x]
    assert [m["source_index"] for m in merged] == list(range(ROWS))
    questions = [json.loads(r)["question"] for r in rows]
    assert [m["question"] for m in merged] == questions
    assert all(m["answer"].startswith("FAKE:") for m in merged)


def test_profile_limits_match_the_adapter_configs():
    """The fake and the adapter state the same documented limits."""
    azure, together = adapter_profiles.AzureOpenAIBatchConfig, adapter_profiles.TogetherBatchConfig
    assert (profiles.AZURE.max_lines, profiles.AZURE.max_file_bytes) == (
        azure.PROVIDER_MAX_REQUESTS_PER_BATCH,
        azure.PROVIDER_MAX_BATCH_BYTES,
    )
    assert (profiles.TOGETHER.max_lines, profiles.TOGETHER.max_file_bytes) == (
        together.PROVIDER_MAX_REQUESTS_PER_BATCH,
        together.PROVIDER_MAX_BATCH_BYTES,
    )
    # one documented "200 MB" (OpenAI's and Azure's API references), one number: issue 38
    from mmirage_beam.providers.openai import OpenAIBatchConfig
    from mmirage_beam.providers.openai.fake_service import OPENAI_MAX_FILE_BYTES

    assert OpenAIBatchConfig.PROVIDER_MAX_BATCH_BYTES == azure.PROVIDER_MAX_BATCH_BYTES
    assert OPENAI_MAX_FILE_BYTES == OpenAIBatchConfig.PROVIDER_MAX_BATCH_BYTES == 200_000_000
    assert (profiles.GROQ.min_window_hours, profiles.GROQ.max_window_hours) == (
        adapter_profiles.GROQ_MIN_WINDOW_HOURS,
        adapter_profiles.GROQ_MAX_WINDOW_HOURS,
    )


def test_azure_refusals(fake_provider):
    import httpx

    fake = fake_provider
    no_key = httpx.get(fake.base_url_for("azure-openai") + "/batches")
    assert no_key.status_code == 401  # neither api-key nor Bearer
    body = no_key.json()["error"]
    assert body["code"] == "401"  # Azure's {"error": {"code", "message"}}
    assert "Access denied" in body["message"]
    legacy = httpx.get(fake.base_url + "/azure/openai/batches", headers={"api-key": "k"})
    assert legacy.status_code == 404  # the data-plane paths need ?api-version=
    az = _client(fake, "azure-openai")
    with pytest.raises(openai.BadRequestError, match="completion_window|48h"):
        _batch(az, [_line("a")], window="48h")
    no_model = _line("a")
    del no_model["body"]["model"]
    failed = _batch(az, [no_model])
    assert failed.status == "failed" and failed.errors.data[0].param == "body.model"
    two = _batch(az, [_line("a", "dep-1"), _line("b", "dep-2")])
    assert two.status == "failed" and two.errors.data[0].code == "model_mismatch"
    # The plain OpenAI API at the root knows nothing of Azure's batches.
    root = openai.OpenAI(api_key="k", base_url=fake.openai_base_url, max_retries=0)
    assert root.batches.list().data == []
    with pytest.raises(openai.NotFoundError):
        root.batches.retrieve(two.id)


def _bare_chat_batch(client) -> object:
    """A batch the way Azure's guide writes it: endpoint and url "/chat/completions"."""
    line = {**_line("a", "my-deployment"), "url": "/chat/completions"}
    uploaded = client.files.create(file=("in.jsonl", json.dumps(line).encode()), purpose="batch")
    created = client.batches.create(
        input_file_id=uploaded.id, endpoint="/chat/completions", completion_window="24h"
    )
    assert created.endpoint == "/chat/completions"  # echoed as given, as Azure's sample
    return client.batches.retrieve(created.id)


def _azure_output(client, batch) -> dict:
    assert batch.status == "completed" and batch.request_counts.completed == 1, batch
    return json.loads(client.files.content(batch.output_file_id).text.splitlines()[0])


def test_azure_accepts_what_azure_accepts(fake_provider):
    """Azure's v1 API takes the plain OpenAI client with a Bearer key (API version
    lifecycle page); AzureOpenAI sends api-key (or a Bearer Entra token), on the v1 base
    URL or on the data-plane paths with ?api-version=; endpoint "/chat/completions"."""
    fake = fake_provider
    v1 = fake.base_url_for("azure-openai")
    clients = {
        "openai-bearer": openai.OpenAI(api_key="azure-key", base_url=v1, max_retries=0),
        "azure-v1-api-key": openai.AzureOpenAI(
            api_key="azure-key", base_url=v1, api_version="preview", max_retries=0
        ),
        "azure-endpoint-api-key": openai.AzureOpenAI(
            api_key="azure-key",
            azure_endpoint=fake.base_url + "/azure",
            api_version="2024-10-21",
            max_retries=0,
        ),
        "azure-endpoint-entra-token": openai.AzureOpenAI(
            azure_ad_token="entra-token",
            azure_endpoint=fake.base_url + "/azure",
            api_version="2024-10-21",
            max_retries=0,
        ),
    }
    for name, client in clients.items():
        out = _azure_output(client, _bare_chat_batch(client))
        assert out["custom_id"] == "a" and out["response"]["status_code"] == 200, name
    # OpenAI's own API keeps its enum: "/chat/completions" is refused there.
    root = openai.OpenAI(api_key="k", base_url=fake.openai_base_url, max_retries=0)
    with pytest.raises(openai.BadRequestError, match="/chat/completions"):
        _bare_chat_batch(root)
    counts = fake.call_counts()
    assert counts["azure-openai:batches_create"] == 4 and counts["batches_create"] == 1


def test_profile_file_limits(fake_provider, monkeypatch):
    fake = fake_provider
    for profile, name in ((profiles.AZURE, "azure-openai"), (profiles.TOGETHER, "together")):
        client = _client(fake, name)
        monkeypatch.setattr(profile, "max_lines", 2)
        lines = [_line(c, together=name == "together") for c in "abc"]
        failed = _batch(client, lines)
        assert failed.status == "failed" and failed.errors.data[0].code == "too_many_tasks"
        assert "maximum is 2" in failed.errors.data[0].message
        monkeypatch.setattr(profile, "max_file_bytes", 100)
        with pytest.raises(openai.BadRequestError, match="too large"):
            client.files.create(file=("in.jsonl", b"{}" + b" " * 100), purpose="batch")


def test_azure_overrunning_job_is_not_expired_until_cancelled(fake_provider):
    fake = fake_provider
    fake.script(expire_after_requests=1)
    az = _client(fake, "azure-openai")
    batch = _batch(az, [_line(c) for c in "abc"])
    assert batch.status == "in_progress"  # OpenAI's own API would say "expired"
    assert (batch.request_counts.completed, batch.expired_at) == (1, None)
    assert az.batches.retrieve(batch.id).status == "in_progress"
    az.batches.cancel(batch.id)
    done = az.batches.retrieve(batch.id)
    assert done.status == "cancelled" and done.request_counts.completed == 1
    errors = [json.loads(x) for x in az.files.content(done.error_file_id).text.split("\n") if x]
    assert {e["error"]["code"] for e in errors} == {"batch_cancelled"}
    root = openai.OpenAI(api_key="k", base_url=fake.openai_base_url, max_retries=0)
    assert _batch(root, [_line(c) for c in "abc"]).status == "expired"


@pytest.mark.parametrize(
    "window,ok",
    [("24h", True), ("72h", True), ("7d", True), ("12h", False), ("8d", False), ("1w", False)],
)
def test_groq_completion_window(fake_provider, window, ok):
    groq = _client(fake_provider, "groq")
    if ok:
        assert _batch(groq, [_line("a")], window=window).status == "completed"
    else:
        with pytest.raises(openai.BadRequestError, match="'24h' to '7d'"):
            _batch(groq, [_line("a")], window=window)


def test_groq_lines_need_method_and_url_as_openai(fake_provider):
    groq = _client(fake_provider, "groq")
    failed = _batch(groq, [_line("a", together=True)])
    assert failed.status == "failed"
    assert {e.param for e in failed.errors.data} == {"method", "url"}


def test_together_line_shape_and_window(fake_provider):
    together = _client(fake_provider, "together")
    lean = _batch(together, [_line("a", together=True)])
    assert lean.status == "completed"
    # together-python's own examples send method and url too: accepted, ignored.
    assert _batch(together, [_line("b")]).status == "completed"
    no_body = {"custom_id": "c"}
    failed = _batch(together, [no_body])
    assert failed.status == "failed" and [e.param for e in failed.errors.data] == ["body"]
    with pytest.raises(openai.BadRequestError, match="'24h'"):
        _batch(together, [_line("d", together=True)], window="48h")
    root = openai.OpenAI(api_key="k", base_url=fake_provider.openai_base_url, max_retries=0)
    assert _batch(root, [_line("e", together=True)]).status == "failed"  # OpenAI needs them


def test_profile_scripted_leading_error_and_markers(fake_provider):
    fake = fake_provider
    fake.script(leading_errors={"status": 503, "count": 1, "paths": ["batches_list"]})
    groq = _client(fake, "groq")
    with pytest.raises(openai.InternalServerError):
        groq.batches.list()
    assert groq.batches.list().data == []
    line = _line("a")
    line["body"]["messages"][0]["content"] = "FAKE_ERROR:server_error"
    done = _batch(groq, [line])
    assert done.status == "completed" and done.request_counts.failed == 1
    assert fake.call_counts()["groq:batches_list"] == 2
