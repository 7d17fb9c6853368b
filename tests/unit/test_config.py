"""Config loading: every MMIRAGE default and every rejection, with the key named."""

from __future__ import annotations

import copy

import pytest

from mmirage_beam.config import config_from_dict, load_config
from mmirage_beam.config.schema import json_schema_for
from mmirage_beam.errors import ConfigError
from mmirage_beam.providers.anthropic import AnthropicBatchConfig
from mmirage_beam.providers.openai import OpenAIBatchConfig
from tests.conftest import base_config, write_config


def _with(cfg, path, value):
    cfg = copy.deepcopy(cfg)
    node = cfg
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if k.isdigit() else node[k]
    last = keys[-1]
    if value is _DELETE:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return cfg


_DELETE = object()


def test_openai_defaults(tmp_path):
    cfg = config_from_dict(base_config(tmp_path))
    p = cfg.processor
    assert isinstance(p, OpenAIBatchConfig)
    assert p.model == "gpt-4.1-mini"
    assert p.batch_endpoint == "/v1/chat/completions"
    assert p.completion_window == "24h"
    assert p.max_chunk_bytes == 52428800
    assert p.max_requests_per_chunk is None
    assert p.effective_max_requests_per_chunk == 50_000
    assert p.oversized_request_policy == "isolate"
    assert p.base_url is None and p.metadata == {}
    assert cfg.num_shards == 1 and cfg.shard_id == 0
    assert cfg.execution.mode == "local" and cfg.execution.retry is False
    assert cfg.inputs[0].type == "text"
    assert cfg.outputs[0].output_type == "plain"


def test_anthropic_defaults(tmp_path):
    p = config_from_dict(base_config(tmp_path, "anthropic")).processor
    assert isinstance(p, AnthropicBatchConfig)
    assert p.model == "claude-haiku-4-5"
    assert p.max_tokens == 8192
    assert p.temperature is None and p.top_p is None and p.timeout_seconds is None
    assert p.effective_max_requests_per_chunk == 100_000


def test_load_config_from_file_and_env_expansion(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_MODEL", "gpt-4o-mini")
    monkeypatch.setenv("SHARD", "1")
    cfg = base_config(tmp_path, model="${MY_MODEL}", base_url="${UNSET_VAR_X:-}")
    cfg["loading_params"]["num_shards"] = 2
    cfg["loading_params"]["shard_id"] = "$SHARD"
    loaded = load_config(write_config(tmp_path, cfg))
    assert loaded.processor.model == "gpt-4o-mini"
    assert loaded.processor.base_url is None
    assert loaded.shard_id == 1


@pytest.mark.parametrize(
    "provider, path, value, key, words",
    [
        (
            "openai",
            "processors.0.completion_window",
            "48h",
            "processors[0].completion_window",
            "24h",
        ),
        ("openai", "processors.0.batch_endpoint", "v1/chat", "processors[0].batch_endpoint", "/"),
        ("openai", "processors.0.max_chunk_bytes", 0, "processors[0].max_chunk_bytes", ">= 1"),
        (
            "openai",
            "processors.0.max_chunk_bytes",
            300 * 1024 * 1024,
            "processors[0].max_chunk_bytes",
            "200 MB",
        ),
        (
            "openai",
            "processors.0.max_requests_per_chunk",
            50_001,
            "processors[0].max_requests_per_chunk",
            "50,000",
        ),
        (
            "anthropic",
            "processors.0.max_requests_per_chunk",
            100_001,
            "processors[0].max_requests_per_chunk",
            "100,000",
        ),
        (
            "anthropic",
            "processors.0.max_chunk_bytes",
            257 * 1024 * 1024,
            "processors[0].max_chunk_bytes",
            "256 MB",
        ),
        (
            "openai",
            "processors.0.oversized_request_policy",
            "drop",
            "processors[0].oversized_request_policy",
            "isolate",
        ),
        ("openai", "processors.0.metadata", {"k": 1}, "processors[0].metadata.k", "strings"),
        ("anthropic", "processors.0.max_tokens", 0, "processors[0].max_tokens", ">= 1"),
        ("anthropic", "processors.0.temperature", 1.5, "processors[0].temperature", "[0, 1]"),
        ("anthropic", "processors.0.top_p", 0, "processors[0].top_p", "(0, 1]"),
        ("anthropic", "processors.0.timeout_seconds", 0, "processors[0].timeout_seconds", "> 0"),
        ("openai", "processors.0.api_key", "sk-x", "processors[0].api_key", "environment"),
        (
            "openai",
            "processors.0.openai_api_key",
            "sk-x",
            "processors[0].openai_api_key",
            "environment",
        ),
        ("anthropic", "processors.0.token", "t", "processors[0].token", "environment"),
        ("openai", "processors.0.provider", "nope", "processors[0].provider", "unknown provider"),
        ("openai", "processors.0.colour", "red", "processors[0].colour", "unknown field"),
        (
            "mistral",
            "processors.0.max_tokens_to_sample",
            5,
            "processors[0].max_tokens_to_sample",
            "unknown field for provider 'mistral'",
        ),
        (
            "openai",
            "loading_params.datasets.0.type",
            "csv",
            "loading_params.datasets[0].type",
            "JSONL",
        ),
        ("openai", "loading_params.shard_id", 3, "loading_params.shard_id", "num_shards"),
        (
            "openai",
            "loading_params.shard_id",
            "$NOT_SET_ANYWHERE",
            "loading_params.shard_id",
            "not set",
        ),
        (
            "openai",
            "processing_params.inputs.0.key",
            "a[",
            "processing_params.inputs[0].key",
            "JMESPath",
        ),
        (
            "openai",
            "processing_params.inputs.0.type",
            "audio",
            "processing_params.inputs[0].type",
            "image",
        ),
        (
            "openai",
            "processing_params.outputs.0.output_type",
            "xml",
            "processing_params.outputs[0].output_type",
            "JSON",
        ),
        (
            "openai",
            "processing_params.outputs.0.name",
            "bad name!",
            "processing_params.outputs[0].name",
            "A-Z",
        ),
        (
            "openai",
            "processing_params.outputs.0.prompt",
            "{{ question ",
            "processing_params.outputs[0].prompt",
            "Jinja2",
        ),
        (
            "openai",
            "processing_params.outputs.0.prompt",
            "{{ nope }}",
            "processing_params.outputs[0].prompt",
            "'nope'",
        ),
        (
            "openai",
            "processing_params.output_schema.x",
            "{{ missing }}",
            "processing_params.output_schema.x",
            "'missing'",
        ),
        (
            "openai",
            "processing_params.outputs.0.output_type",
            "JSON",
            "processing_params.outputs[0].output_schema",
            "required",
        ),
        ("openai", "execution_params.mode", "cloud", "execution_params.mode", "local"),
        ("openai", "processing_params", _DELETE, "processing_params", "missing"),
    ],
)
def test_rejections_name_the_key(tmp_path, provider, path, value, key, words):
    cfg = _with(base_config(tmp_path, provider), path, value)
    with pytest.raises(ConfigError) as info:
        config_from_dict(cfg)
    assert info.value.key == key, str(info.value)
    assert words in info.value.message, str(info.value)
    assert info.value.exit_code == 2


def test_temperature_and_top_p_together_rejected(tmp_path):
    cfg = base_config(tmp_path, "anthropic", temperature=0.5, top_p=0.9)
    with pytest.raises(ConfigError, match="mutually exclusive"):
        config_from_dict(cfg)


def test_env_var_missing_is_named(tmp_path):
    cfg = base_config(tmp_path, model="${DEFINITELY_NOT_SET_VAR}")
    with pytest.raises(ConfigError) as info:
        config_from_dict(cfg)
    assert info.value.key == "processors[0].model"
    assert "DEFINITELY_NOT_SET_VAR" in info.value.message


def test_duplicate_output_names_rejected(tmp_path):
    cfg = base_config(tmp_path)
    outs = cfg["processing_params"]["outputs"]
    outs.append(copy.deepcopy(outs[0]))
    with pytest.raises(ConfigError, match="duplicate output name") as info:
        config_from_dict(cfg)
    assert info.value.key == "processing_params.outputs[1].name"


def test_dataset_types_case_insensitive_and_batch_size_accepted(tmp_path):
    cfg = base_config(tmp_path)
    cfg["loading_params"]["datasets"][0]["type"] = "jsonl"
    cfg["loading_params"]["batch_size"] = 512
    cfg["loading_params"]["state_dir"] = str(tmp_path / "state")
    cfg["execution_params"] = {"mode": "local", "retry": True, "merge": False, "extra_knob": 3}
    loaded = config_from_dict(cfg)
    assert loaded.datasets[0].type == "JSONL"
    assert loaded.batch_size == 512
    assert loaded.execution.retry is True and loaded.execution.extra == {"extra_knob": 3}


def test_missing_config_file_is_exit_2(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.yaml")
    assert info.value.exit_code == 2 and info.value.key == "--config"


def test_json_output_schema_forms():
    assert json_schema_for(["a", "b"]) == {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    }
    schema = json_schema_for(
        {"n": "int", "score": {"type": "float", "min": 0, "max": 1}, "tags": "list", "ok": "bool"}
    )
    assert schema["properties"]["n"] == {"type": "integer"}
    assert schema["properties"]["score"] == {"type": "number", "minimum": 0, "maximum": 1}
    assert schema["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    assert schema["properties"]["ok"] == {"type": "boolean"}
    assert schema["required"] == ["n", "score", "tags", "ok"]
    with pytest.raises(ConfigError, match="unknown type"):
        json_schema_for({"x": "decimal"})
    with pytest.raises(ConfigError, match="greater than max"):
        json_schema_for({"x": {"type": "int", "min": 5, "max": 1}})


def test_json_output_schema_error_names_field(tmp_path):
    cfg = base_config(tmp_path)
    out = cfg["processing_params"]["outputs"][0]
    out["output_type"] = "JSON"
    out["output_schema"] = {"x": "decimal"}
    with pytest.raises(ConfigError) as info:
        config_from_dict(cfg)
    assert info.value.key == "processing_params.outputs[0].output_schema.x.type"


def test_shipped_configs_load(monkeypatch):
    """Every shipped config loads, and there is one for every built-in provider (issue
    38: none for azure-openai, groq and together)."""
    from mmirage_beam.providers.base import BatchAdapterRegistry
    from tests.conftest import REPO

    for name in ("AZURE_OPENAI_BASE_URL", "MMIRAGE_OPENAI_BASE_URL", "MMIRAGE_MISTRAL_BASE_URL"):
        monkeypatch.delenv(name, raising=False)  # the configs' own defaults
    providers = set()
    for path in sorted((REPO / "configs").glob("*.yaml")):
        providers.add(load_config(path).processor.provider)
    built_in = {"openai", "anthropic", "gemini", "mistral", "azure-openai", "groq", "together"}
    assert built_in <= set(BatchAdapterRegistry.names())
    assert providers >= built_in, sorted(built_in - providers)


@pytest.mark.parametrize(
    "path, value, key, words",
    [
        (
            "processing_params.outputs.0.output_tpye",
            "JSON",
            "processing_params.outputs[0].output_tpye",
            "'output_type'",
        ),
        (
            "processing_params.outputs.0.promt",
            "x",
            "processing_params.outputs[0].promt",
            "'prompt'",
        ),
        (
            "processing_params.inputs.0.kye",
            "x",
            "processing_params.inputs[0].kye",
            "accepted: default, key",
        ),
        (
            "processing_params.remove_column",
            True,
            "processing_params.remove_column",
            "'remove_columns'",
        ),
        ("loading_params.num_shard", 2, "loading_params.num_shard", "'num_shards'"),
        (
            "loading_params.datasets.0.outptu_dir",
            "x",
            "loading_params.datasets[0].outptu_dir",
            "'output_dir'",
        ),
    ],
)
def test_typos_are_errors_not_silently_ignored(tmp_path, path, value, key, words):
    cfg = _with(base_config(tmp_path), path, value)
    with pytest.raises(ConfigError) as info:
        config_from_dict(cfg)
    assert info.value.key == key and words in info.value.message


def test_schema_bound_typo_is_an_error(tmp_path):
    cfg = base_config(tmp_path)
    out = cfg["processing_params"]["outputs"][0]
    out["output_type"] = "JSON"
    out["output_schema"] = {"x": {"type": "int", "minimum": 1}}
    with pytest.raises(ConfigError) as info:
        config_from_dict(cfg)
    assert info.value.key == "processing_params.outputs[0].output_schema.x.minimum"


def test_unrelated_keys_of_other_modes_are_only_warned(tmp_path, caplog):
    cfg = base_config(tmp_path)
    cfg["loading_params"]["cache_directory"] = "/tmp/x"
    config_from_dict(cfg)
    assert "loading_params.cache_directory" in caplog.text


def test_the_original_tools_config_loads_unchanged():
    from tests.conftest import TEST_DATA

    cfg = load_config(TEST_DATA / "mmirage_original" / "config.yaml")
    assert cfg.processor.model == "gpt-4o-mini" and cfg.processor.max_requests_per_chunk == 10
    assert [o.name for o in cfg.outputs] == ["rewritten"]


def test_json_field_typo_in_output_schema_fails_at_load(tmp_path):
    cfg = base_config(tmp_path)
    out = cfg["processing_params"]["outputs"][0]
    out["output_type"] = "JSON"
    out["output_schema"] = {"label": "str", "score": "int"}
    cfg["processing_params"]["output_schema"] = {"x": "{{ answer.lable }}"}
    with pytest.raises(ConfigError) as info:
        config_from_dict(cfg)
    assert info.value.key == "processing_params.output_schema.x"
    assert "no field 'lable'" in info.value.message and "label, score" in info.value.message
    cfg["processing_params"]["output_schema"] = {"x": "{{ answer['score'] }} {{ answer.label }}"}
    config_from_dict(cfg)  # declared fields are fine


def test_plugin_config_value_error_is_a_config_error(tmp_path):
    from dataclasses import dataclass

    from mmirage_beam.config import BatchProviderConfig, BatchProviderConfigRegistry

    @dataclass
    class PickyConfig(BatchProviderConfig):
        provider: str = "picky"
        level: int = 1

        def __post_init__(self) -> None:
            super().__post_init__()
            if self.level > 3:
                raise ValueError("level must be at most 3")

    BatchProviderConfigRegistry.register("picky", PickyConfig)
    with pytest.raises(ConfigError) as info:
        config_from_dict(base_config(tmp_path, "picky", level=9))
    assert info.value.key == "processors[0]" and "at most 3" in info.value.message


@pytest.mark.parametrize(
    "endpoint",
    [
        "/v1/completions",
        "/v1/moderations",
        "/v1/images/generations",
        "/v1/images/edits",
        "/v1/videos",
        "/v1/chat/completion",
    ],
)
def test_non_generative_endpoints_are_refused_at_load(tmp_path, endpoint):
    """Only prompt -> text endpoints (and /v1/embeddings for embedding outputs:
    tests/cli/test_embeddings.py) are built; the rest would fail every request."""
    cfg = base_config(tmp_path, batch_endpoint=endpoint)
    with pytest.raises(ConfigError) as info:
        config_from_dict(cfg)
    assert info.value.key == "processors[0].batch_endpoint"
    message = str(info.value)
    assert repr(endpoint) in message
    assert "/v1/chat/completions" in message and "/v1/responses" in message
    assert info.value.exit_code == 2


@pytest.mark.parametrize("endpoint", ["/v1/chat/completions", "/v1/responses"])
def test_generative_endpoints_load(tmp_path, endpoint):
    assert (
        config_from_dict(base_config(tmp_path, batch_endpoint=endpoint)).processor.batch_endpoint
        == endpoint
    )


def test_an_unknown_provider_field_gets_a_did_you_mean_and_a_non_string_key_no_crash(tmp_path):
    """A misspelt field is named with the closest one; a YAML key that is not a string
    (``0:``, found by tests/transforms/test_fuzz.py) is named too, with no suggestion."""
    cfg = base_config(tmp_path, temprature=0.2)
    with pytest.raises(
        ConfigError, match=r"processors\[0\]\.temprature.*did you mean 'temperature'"
    ):
        config_from_dict(cfg)
    cfg = base_config(tmp_path)
    cfg["processors"][0][0] = None
    with pytest.raises(ConfigError, match=r"processors\[0\]\.0: unknown field"):
        config_from_dict(cfg)
