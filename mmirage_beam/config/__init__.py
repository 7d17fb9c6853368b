"""Configuration: provider configs (plugins) and the YAML loader."""

from mmirage_beam.config.batch_provider import (
    AnthropicBatchConfig,
    BatchProviderConfig,
    BatchProviderConfigRegistry,
    OpenAIBatchConfig,
)
from mmirage_beam.config.loader import (
    DatasetConfig,
    ExecutionConfig,
    InputConfig,
    OutputConfig,
    PipelineConfig,
    config_from_dict,
    load_config,
)

__all__ = [
    "AnthropicBatchConfig",
    "BatchProviderConfig",
    "BatchProviderConfigRegistry",
    "DatasetConfig",
    "ExecutionConfig",
    "InputConfig",
    "OutputConfig",
    "OpenAIBatchConfig",
    "PipelineConfig",
    "config_from_dict",
    "load_config",
]
