"""Configuration: the provider config contract (plugins) and the YAML loader.

Each provider's own config class lives in its package (``mmirage_beam/providers/<name>/``).
"""

from mmirage_beam.config.loader import (
    DatasetConfig,
    ExecutionConfig,
    InputConfig,
    OutputConfig,
    PipelineConfig,
    config_from_dict,
    load_config,
)
from mmirage_beam.providers.config import (
    BatchProviderConfig,
    BatchProviderConfigRegistry,
)

__all__ = [
    "BatchProviderConfig",
    "BatchProviderConfigRegistry",
    "DatasetConfig",
    "ExecutionConfig",
    "InputConfig",
    "OutputConfig",
    "PipelineConfig",
    "config_from_dict",
    "load_config",
]
