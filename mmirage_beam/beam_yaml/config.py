"""The config of a Beam YAML transform: its arguments -> a validated ``PipelineConfig``.

:func:`build_config` reads an mmirage YAML file or builds the config from the
transform's arguments, validated exactly as ``load_config`` validates a file, and names
a bad value by its Beam YAML argument (``processor.model``, ``outputs[0].prompt``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from mmirage_beam.beam_yaml.rows import YAML_ROWS_LABEL
from mmirage_beam.config.loader import (
    DatasetConfig,
    PipelineConfig,
    config_from_dict,
    load_config,
    resolve_config_paths,
)
from mmirage_beam.errors import ConfigError

__all__ = ["build_config", "config_or_raise", "yaml_key"]


#: Beam YAML argument -> the config key it stands for (for messages both ways).
_KEY_MAP = (
    ("processors[0]", "processor"),
    ("loading_params.datasets[0].image_base_path", "image_base_path"),
    ("loading_params.datasets[0].output_dir", "output_dir"),
    ("loading_params.state_dir", "state_dir"),
    ("processing_params.", ""),
    ("execution_params.", ""),
)


def yaml_key(key: str) -> str:
    """A config key (``processors[0].model``) as the Beam YAML argument it stands for
    (``processor.model``); a key without one is returned as it is."""
    for config_key, arg in _KEY_MAP:
        if key.startswith(config_key):
            rest = key[len(config_key) :]
            if arg and rest and not rest.startswith((".", "[")):
                continue
            return arg + rest
    return key


def _inputs_arg(inputs: Any) -> Any:
    """``inputs`` as a mapping ``name: JMESPath`` or MMIRAGE's list of ``{name, key,
    type, default}``."""
    if isinstance(inputs, dict):
        out = []
        for name, spec in inputs.items():
            if isinstance(spec, dict):
                out.append({"name": name, **spec})
            else:
                out.append({"name": name, "key": spec})
        return out
    return inputs


def build_config(
    config: Optional[str] = None,
    *,
    processor: Optional[Mapping[str, Any]] = None,
    inputs: Any = None,
    outputs: Any = None,
    output_schema: Any = None,
    remove_columns: Optional[bool] = None,
    state_dir: Optional[str] = None,
    image_base_path: Optional[str] = None,
    output_dir: Optional[str] = None,
    skip_invalid_rows: Optional[bool] = None,
    chunking_parallelism: Optional[int] = None,
) -> PipelineConfig:
    """The :class:`PipelineConfig` of a Beam YAML transform: from the mmirage YAML file
    ``config`` (its ``loading_params.datasets`` are not read: the rows come from the
    pipeline), or from the arguments, validated exactly as ``load_config`` validates a
    file and with every path made absolute against the current directory.

    Args:
        config: path of an mmirage-beam YAML config; the other arguments must then be
            unset, except ``image_base_path`` and ``output_dir``.
        processor: the ``batch_api`` processor (``provider``, ``model``,
            ``metadata_output_path``, ``max_chunk_bytes``, ``max_requests_per_chunk``,
            ``base_url``, ...; ``type: batch_api`` implied).
        inputs: ``{name: JMESPath}`` (or ``{name: {key, type, default}}``, or MMIRAGE's
            list of ``{name, key, type, default}``).
        outputs: MMIRAGE's list of ``{name, prompt, output_type, output_schema}``.
        output_schema, remove_columns: as ``processing_params``.
        state_dir: as ``loading_params.state_dir``.
        image_base_path: what relative image paths in the rows resolve against
            (default: the current directory).
        output_dir: where placeholder rows are written (default: none written).
        skip_invalid_rows, chunking_parallelism: as ``execution_params``.

    Raises:
        ConfigError: naming the Beam YAML argument (``processor.model``,
            ``outputs[0].prompt``, ...) or, with ``config``, the key of the file.
    """
    for key, value in (
        ("state_dir", state_dir),
        ("image_base_path", image_base_path),
        ("output_dir", output_dir),
    ):
        if value is not None and (not isinstance(value, str) or not value):
            raise ConfigError(key, f"must be a path, got {value!r}")
    if config is not None:
        given = {
            "processor": processor,
            "inputs": inputs,
            "outputs": outputs,
            "output_schema": output_schema,
            "remove_columns": remove_columns,
            "state_dir": state_dir,
            "skip_invalid_rows": skip_invalid_rows,
            "chunking_parallelism": chunking_parallelism,
        }
        both = sorted(k for k, v in given.items() if v is not None)
        if both:
            raise ConfigError(
                both[0], "cannot be given together with config: (set it in the config file)"
            )
        if not isinstance(config, str) or not config:
            raise ConfigError("config", "must be the path of an mmirage-beam YAML config")
        cfg = load_config(config)
        first = cfg.datasets[0]
        dataset = DatasetConfig(
            path=YAML_ROWS_LABEL,
            type="JSONL",
            output_dir=first.output_dir if output_dir is None else output_dir,
            image_base_path=first.image_base_path if image_base_path is None else image_base_path,
        )
        return _rows_label(resolve_config_paths(dataclasses.replace(cfg, datasets=(dataset,))))
    required = (("processor", processor), ("inputs", inputs), ("outputs", outputs))
    missing = [k for k, v in required if v is None]
    if missing:
        raise ConfigError(missing[0], "is required (or give config: path/to/mmirage.yaml)")
    if not isinstance(processor, dict):
        raise ConfigError("processor", "must be a mapping (provider, model, ...)")
    if processor.get("type", "batch_api") != "batch_api":
        raise ConfigError("processor.type", "must be batch_api (or left out)")
    dataset: dict[str, Any] = {"path": YAML_ROWS_LABEL, "type": "JSONL"}
    if output_dir is not None:
        dataset["output_dir"] = output_dir
    if image_base_path is not None:
        dataset["image_base_path"] = image_base_path
    loading: dict[str, Any] = {"datasets": [dataset]}
    if state_dir is not None:
        loading["state_dir"] = state_dir
    processing: dict[str, Any] = {"inputs": _inputs_arg(inputs), "outputs": outputs}
    if output_schema is not None:
        processing["output_schema"] = output_schema
    if remove_columns is not None:
        processing["remove_columns"] = remove_columns
    execution: dict[str, Any] = {"mode": "local"}
    if skip_invalid_rows is not None:
        execution["skip_invalid_rows"] = skip_invalid_rows
    if chunking_parallelism is not None:
        execution["chunking_parallelism"] = chunking_parallelism
    raw = {
        "processors": [{**processor, "type": "batch_api"}],
        "loading_params": loading,
        "processing_params": processing,
        "execution_params": execution,
    }
    try:
        cfg = config_from_dict(raw)
    except ConfigError as exc:
        raise ConfigError(yaml_key(exc.key), exc.message) from None
    if not processor.get("metadata_output_path") and state_dir is None:
        raise ConfigError(
            "processor.metadata_output_path",
            "is required (or state_dir): it is where the receipts of the run are written",
        )
    return _rows_label(resolve_config_paths(cfg))


def _rows_label(cfg: PipelineConfig) -> PipelineConfig:
    """The one dataset is the pipeline's rows: its ``path`` (only ever used in
    messages) is a label, not a file, so it is not resolved."""
    return dataclasses.replace(
        cfg, datasets=(dataclasses.replace(cfg.datasets[0], path=YAML_ROWS_LABEL),)
    )


def config_or_raise(transform: str, **kwargs: Any) -> PipelineConfig:
    """:func:`build_config` of ``kwargs`` for the transform named ``transform``.

    Raises:
        ConfigError: its key prefixed with ``<transform>.config.``.
    """
    try:
        return build_config(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{transform}.config.{exc.key}", exc.message) from None
