"""OpenAI-compatible services as named profiles of the OpenAI adapter: each refuses at
load what its service refuses, builds its own line shape, and (Azure, the profile whose
protocol is OpenAI's own) runs against the embedded fake's OpenAI API."""

from __future__ import annotations

import json

import pytest

from mmirage_beam.config.loader import config_from_dict
from mmirage_beam.errors import ConfigError
from tests.conftest import base_config, write_config

AZURE = "https://example-resource.openai.azure.com/openai/v1/"


@pytest.mark.parametrize(
    "provider,fields,key",
    [
        ("azure-openai", {}, "base_url"),
        ("azure-openai", {"base_url": AZURE, "completion_window": "48h"}, "completion_window"),
        ("azure-openai", {"base_url": AZURE, "max_requests_per_chunk": 100_001}, "max_requests"),
        ("azure-openai", {"base_url": AZURE, "batch_endpoint": "/v1/responses"}, "batch_endpoint"),
        ("groq", {"completion_window": "12h"}, "completion_window"),
        ("groq", {"completion_window": "8d"}, "completion_window"),
        ("together", {"completion_window": "48h"}, "completion_window"),
        ("together", {"max_requests_per_chunk": 50_001}, "max_requests_per_chunk"),
        ("together", {"max_chunk_bytes": 100_000_001}, "max_chunk_bytes"),
    ],
)
def test_each_profile_refuses_at_load_what_its_service_refuses(tmp_path, provider, fields, key):
    with pytest.raises(ConfigError, match=key):
        config_from_dict(base_config(tmp_path, provider, **fields))


def test_accepted_profile_settings_and_line_shapes(tmp_path):
    groq = config_from_dict(base_config(tmp_path, "groq", completion_window="7d")).processor
    assert (groq.completion_window, groq.base_url) == ("7d", "https://api.groq.com/openai/v1")
    assert config_from_dict(base_config(tmp_path, "groq", completion_window="72h"))
    from mmirage_beam.providers.base import BatchAdapterRegistry

    payload = {"messages": [{"role": "user", "content": "hi"}], "images": []}
    together_cfg = config_from_dict(base_config(tmp_path, "together")).processor
    line = BatchAdapterRegistry.get("together")().build_request("a-text-0", payload, together_cfg)
    assert set(line) == {"custom_id", "body"} and line["body"]["model"] == together_cfg.model
    azure_cfg = config_from_dict(base_config(tmp_path, "azure-openai", base_url=AZURE)).processor
    line = BatchAdapterRegistry.get("azure-openai")().build_request("a-text-0", payload, azure_cfg)
    assert (line["url"], line["method"]) == ("/v1/chat/completions", "POST")


def test_azure_profile_runs_against_the_openai_protocol(
    tmp_path, capsys, monkeypatch, fake_provider
):
    from pipelines.merge import main as merge_main
    from pipelines.submit import main as submit_main

    fake = fake_provider
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "azure-test-key")
    cfg = base_config(
        tmp_path, "azure-openai", base_url=fake.openai_base_url, model="my-deployment"
    )
    lines = tmp_path / "rows.jsonl"
    lines.write_text('{"question": "1+1?"}\n{"question": "2+2?"}\n', encoding="utf-8")
    cfg["loading_params"]["datasets"][0]["path"] = str(lines)
    path = write_config(tmp_path, cfg)
    assert submit_main(["--config", path, "--run-id", "az"]) == 0
    assert "price unknown" in capsys.readouterr().out.lower()
    sent = fake.submitted_requests("openai")
    assert {r["request"]["body"]["model"] for r in sent} == {"my-deployment"}
    out = tmp_path / "merged.jsonl"
    assert merge_main(["--config", path, "--output-path", str(out)]) == 0
    merged = [json.loads(x) for x in out.read_text(encoding="utf-8").split("\n") if x]
    assert [m["source_index"] for m in merged] == [0, 1]
    assert all(m["answer"].startswith("FAKE:") for m in merged)
