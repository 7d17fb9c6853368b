"""OpenAI `timeout_seconds`: passed to the SDK, and a create whose answer times out after
the provider made the batch is adopted, not created twice."""

from __future__ import annotations

import collections

import pytest

from mmirage_beam.errors import ConfigError
from mmirage_beam.providers.openai import OpenAIBatchConfig
from mmirage_beam.providers.openai.adapter import OpenAIBatchAdapter
from pipelines.submit import main as submit_main
from tests.conftest import base_config, write_config
from tests.slow_proxy import SlowProxy


def test_timeout_seconds_reaches_the_sdk_client_and_is_validated():
    adapter = OpenAIBatchAdapter({"api_key": "sk-test"})
    adapter.setup(OpenAIBatchConfig(timeout_seconds=2.5))
    assert adapter._client.timeout == 2.5
    adapter.teardown()
    with pytest.raises(ConfigError, match="timeout_seconds"):
        OpenAIBatchConfig(timeout_seconds=0)
    with pytest.raises(ConfigError, match="timeout_seconds"):
        OpenAIBatchConfig(timeout_seconds="soon")


def test_a_create_that_times_out_after_acceptance_is_adopted(tmp_path, provider_env, caplog):
    fake = provider_env
    with SlowProxy(fake.base_url) as proxy:
        proxy.delay("POST", "/v1/batches", 3.0, count=2)
        cfg = base_config(
            tmp_path,
            base_url=proxy.base_url + "/v1",
            timeout_seconds=1,
            max_requests_per_chunk=500,
        )
        assert submit_main(["--config", write_config(tmp_path, cfg)]) == 0
        assert proxy.delayed == 2
    assert len(fake.batches("openai")) == 3  # 1319 requests in chunks of 500
    sent = collections.Counter(r["custom_id"] for r in fake.submitted_requests())
    assert len(sent) == 1319 and set(sent.values()) == {1}
    assert "adopted" in caplog.text and "not creating a second batch" in caplog.text
