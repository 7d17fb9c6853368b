"""Load and validate an MMIRAGE-compatible YAML config (``batch_api`` mode).

Everything is validated when the pipeline graph is built and before any data is read;
every problem raises :class:`~mmirage_beam.errors.ConfigError` naming the YAML key. This
module reads the file and makes its paths absolute; the records live in
:mod:`~mmirage_beam.config.pipeline_config`, the checks in
:mod:`~mmirage_beam.config.validation`, both re-exported here.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Optional

import yaml

from mmirage_beam.config import pipeline_config
from mmirage_beam.config.pipeline_config import *  # noqa: F403 (the records, re-exported)
from mmirage_beam.config.pipeline_config import PipelineConfig
from mmirage_beam.config.validation import config_from_dict, expand_env
from mmirage_beam.errors import ConfigError
from mmirage_beam.paths import resolve_optional, resolve_path

__all__ = [
    *pipeline_config.__all__,
    "expand_env",
    "load_config",
    "resolve_config_paths",
    "config_from_dict",
]


def load_config(path: str | os.PathLike[str], check_models: bool = True) -> PipelineConfig:
    """Read, expand and validate the YAML config at ``path``.

    Every path (datasets' ``path``, ``output_dir`` and ``image_base_path``,
    ``metadata_output_path``, ``state_dir``) is made absolute against the current working
    directory of the calling process, as MMIRAGE resolves them, so that workers in other
    processes or folders see the same files (:func:`resolve_config_paths`). URIs such as
    ``gs://bucket/x`` are kept. Relative image paths inside the rows resolve against
    ``image_base_path``, which defaults to that directory. ``check_models``: see
    :func:`~mmirage_beam.config.validation.config_from_dict`.

    Raises:
        ConfigError: (exit status 2) for a missing file, a file that is not UTF-8, bad
            YAML or any invalid key.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError("--config", f"config file not found: {path}")
    data = p.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            "--config",
            f"{path} is not UTF-8 text: byte 0x{data[exc.start]:02x} at byte offset {exc.start}",
        ) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("--config", f"{path} is not valid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError("--config", f"{path} is not valid YAML: nested too deeply") from None
    cfg = resolve_config_paths(config_from_dict(raw, check_models))
    return dataclasses.replace(cfg, config_path=str(path))


def resolve_config_paths(cfg: PipelineConfig, base_dir: Optional[str] = None) -> PipelineConfig:
    """``cfg`` with every path absolute (or a URI), relative ones resolved against
    ``base_dir`` (default: the current working directory). Idempotent.

    Call it in the launcher, before building a pipeline: workers never see a relative
    path. :func:`load_config` does it already.
    """
    base_dir = base_dir or os.getcwd()
    datasets = tuple(
        dataclasses.replace(
            d,
            path=resolve_path(d.path, base_dir),
            output_dir=resolve_path(d.output_dir, base_dir),
            image_base_path=resolve_path(d.image_base_path or base_dir, base_dir),
        )
        for d in cfg.datasets
    )
    processor = cfg.processor
    if processor.metadata_output_path:
        processor = dataclasses.replace(
            processor, metadata_output_path=resolve_path(processor.metadata_output_path, base_dir)
        )
    return dataclasses.replace(
        cfg,
        datasets=datasets,
        processor=processor,
        state_dir=resolve_optional(cfg.state_dir or ".", base_dir),
        execution=dataclasses.replace(
            cfg.execution,
            merge_output_path=resolve_optional(cfg.execution.merge_output_path, base_dir),
        ),
    )
