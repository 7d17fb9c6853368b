"""OpenAI-compatible services as named profiles of the OpenAI adapter: each refuses at
load what its service refuses and builds its own line shape. Runs against the fake's
emulation of each service are in tests/providers/test_fake_profiles.py."""

from __future__ import annotations

import pytest

from mmirage_beam.config.loader import config_from_dict
from mmirage_beam.errors import ConfigError
from tests.conftest import base_config

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
