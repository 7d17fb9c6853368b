"""The project's side of the model and parameter rules (mmirage_beam/providers/model_rules.py
and each provider's rules.py, the tables the fake provider shares): an unlisted model is
warned about at config load with "did you mean", a setting the model family refuses is a
ConfigError naming the YAML key; the tables are built from the SDKs' own types."""

from __future__ import annotations

import logging
import typing

import pytest

from mmirage_beam.config.loader import config_from_dict
from mmirage_beam.errors import ConfigError
from mmirage_beam.providers.anthropic.rules import RULES as ANTHROPIC
from mmirage_beam.providers.gemini.rules import RULES as GEMINI
from mmirage_beam.providers.mistral.rules import RULES as MISTRAL
from mmirage_beam.providers.openai import OpenAIBatchConfig
from mmirage_beam.providers.openai.profiles import AzureOpenAIBatchConfig
from mmirage_beam.providers.openai.rules import RULES as OPENAI
from tests.conftest import base_config

TABLES = {"openai": OPENAI, "anthropic": ANTHROPIC, "gemini": GEMINI, "mistral": MISTRAL}


def test_the_names_come_from_the_sdk_types():
    from anthropic.types import Model
    from openai.types.shared import ChatModel

    chat = [a for arg in typing.get_args(ChatModel) for a in typing.get_args(arg)] or list(
        typing.get_args(ChatModel)
    )
    assert set(chat) <= OPENAI.names()
    assert "gpt-4o-mini" in OPENAI.names() and "gpt-3.5-turbo-instruct" in OPENAI.names()
    anthropic_names = {a for arg in typing.get_args(Model) for a in typing.get_args(arg)}
    assert anthropic_names and anthropic_names <= ANTHROPIC.names()
    # each provider's config class carries its table; the profiles name deployments
    assert OpenAIBatchConfig.MODEL_RULES is OPENAI
    assert AzureOpenAIBatchConfig.MODEL_RULES is None


@pytest.mark.parametrize(
    ("provider", "model", "known"),
    [
        ("openai", "gpt-4o-mini", True),
        ("openai", "gpt-4o-mini-2024-07-18", True),
        ("openai", "ft:gpt-4o-mini-2024-07-18:acme:demo:abc123", True),
        ("openai", "gpt-4o-mini-TYPO", False),
        ("anthropic", "claude-haiku-4-5", True),
        ("anthropic", "claude-haiku-4-5-20251001", True),
        ("anthropic", "claude-haiku-4-5-TYPO", False),
        ("gemini", "gemini-2.5-flash", True),
        ("gemini", "models/gemini-2.5-flash-lite", True),
        ("gemini", "gemini-2.5-flsh", False),
        ("mistral", "mistral-small-latest", True),
        ("mistral", "mistral-medium-2508", True),
        ("mistral", "ft:open-mistral-7b:abc:20240531:def", True),
        ("mistral", "mistral-TYPO", False),
    ],
)
def test_known_models(provider, model, known):
    assert TABLES[provider].is_known(model) is known
    assert TABLES[provider].is_known(model, extra=[model])  # --models admits any name


def test_request_keys_are_the_sdk_params_typeddicts():
    from openai.types.chat.completion_create_params import CompletionCreateParamsBase

    chat = OPENAI.request_keys("/v1/chat/completions")
    assert set(CompletionCreateParamsBase.__annotations__) <= chat and "stream" in chat
    assert "max_tokens_to_sample" not in chat
    assert "max_output_tokens" in OPENAI.request_keys("/v1/responses")
    assert {"thinking", "system", "tools", "temperature"} <= ANTHROPIC.request_keys("/v1/messages")


def test_an_unlisted_model_is_warned_with_did_you_mean(tmp_path, caplog):
    cfg = base_config(tmp_path, model="gpt-4o-mini-TYPO")
    with caplog.at_level(logging.WARNING):
        config = config_from_dict(cfg)
    assert config.processor.model == "gpt-4o-mini-TYPO"  # warned, not refused
    assert "processors[0].model: 'gpt-4o-mini-TYPO' is not a model the openai SDK lists" in (
        caplog.text
    )
    assert "did you mean 'gpt-4o-mini'?" in caplog.text


def test_a_config_loaded_twice_warns_once(tmp_path, caplog):
    """``mmirage run`` loads its config twice (the cycle's flags, then the command):
    the typo is said once (newcomer trial: printed twice)."""
    cfg = base_config(tmp_path, model="gpt-4o-minii")
    with caplog.at_level(logging.WARNING):
        config_from_dict(cfg)
        config_from_dict(cfg)
    assert caplog.text.count("gpt-4o-minii") == 1


def test_a_misspelled_provider_gets_did_you_mean(tmp_path):
    cfg = base_config(tmp_path, provider="opanai")
    with pytest.raises(ConfigError) as err:
        config_from_dict(cfg)
    assert "did you mean 'openai'?" in str(err.value)


def test_a_listed_model_is_not_warned(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        config_from_dict(base_config(tmp_path, model="gpt-4o-mini"))
        config_from_dict(base_config(tmp_path, "anthropic", model="claude-haiku-4-5"))
    assert "is not a model" not in caplog.text


@pytest.mark.parametrize("setting", ["temperature", "top_p"])
def test_a_setting_the_reasoning_family_refuses_is_refused_naming_the_key(tmp_path, setting):
    cfg = base_config(tmp_path, model="o3", **{setting: 0.2})
    with pytest.raises(ConfigError) as info:
        config_from_dict(cfg)
    assert info.value.key == f"processors[0].{setting}"
    assert "Only the default (1) value is supported" in info.value.message
    # the same settings on a non-reasoning model, or 1 on a reasoning one, load
    config_from_dict(base_config(tmp_path, model="gpt-4.1-mini", **{setting: 0.2}))
    config_from_dict(base_config(tmp_path, model="o3", **{setting: 1}))
    # max_tokens is sent as max_completion_tokens: a reasoning model takes it
    config_from_dict(base_config(tmp_path, model="gpt-5-mini", max_tokens=64))


def test_param_refusals_of_the_families():
    refused = OPENAI.refusals("o3", {"max_tokens": 5, "temperature": 0.5})
    assert [r.key for r in refused] == ["max_tokens", "temperature"]
    assert refused[0].hint == "max_completion_tokens"
    assert OPENAI.refusals("gpt-4o", {"max_tokens": 5}) == []
    assert OPENAI.refusals("gpt-5-chat-latest", {"temperature": 0.5}) == []
    thinking = {"type": "enabled", "budget_tokens": 2000}
    over = ANTHROPIC.refusals("claude-haiku-4-5", {"max_tokens": 1000, "thinking": thinking})
    assert [r.key for r in over] == ["thinking.budget_tokens"]
    assert ANTHROPIC.refusals("claude-haiku-4-5", {"max_tokens": 4000, "thinking": thinking}) == []


def test_a_profile_deployment_name_is_not_warned(tmp_path, caplog):
    cfg = base_config(tmp_path, "azure-openai", model="my-deployment")
    cfg["processors"][0]["base_url"] = "https://example.openai.azure.com/openai/v1"
    with caplog.at_level(logging.WARNING):
        config_from_dict(cfg)
    assert "is not a model" not in caplog.text
