"""Validate a parsed YAML config (``batch_api`` mode) into a :class:`PipelineConfig`.

:func:`config_from_dict` checks every section, key and value when the pipeline graph is
built, before any data is read; every problem raises
:class:`~mmirage_beam.errors.ConfigError` naming the YAML key. :func:`expand_env`
expands ``${VAR}`` first. :mod:`mmirage_beam.config.loader` reads the file and
re-exports both.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Iterator
from typing import Any

from mmirage_beam.config.pipeline_config import (
    DATASET_TYPES,
    INPUT_TYPES,
    NOTIFY_EVENTS,
    NOTIFY_FORMATS,
    OUTPUT_NAME_RE,
    OUTPUT_TYPES,
    DatasetConfig,
    ExecutionConfig,
    InputConfig,
    NotifyTarget,
    OutputConfig,
    PipelineConfig,
)
from mmirage_beam.config.schema import json_schema_for
from mmirage_beam.errors import ConfigError, require_int
from mmirage_beam.providers import model_rules
from mmirage_beam.providers.config import BatchProviderConfig, BatchProviderConfigRegistry
from mmirage_beam.results import EMBEDDING

__all__ = ["check_notify_secrets", "config_from_dict", "expand_env"]

_LOG = logging.getLogger(__name__)
#: the model-rule warnings given in this process (each is said once)
_WARNED: set[str] = set()


def model_warnings() -> list[str]:
    """The model-name warnings said at config load in this process (a model the
    provider's SDK does not list), for a run's summary to repeat at its end."""
    return sorted(_WARNED)


_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_SECRET_KEY_RE = re.compile(r"^(api_key|.*_api_key|token|.*_token|secret|.*_secret)$", re.I)


def expand_env(value: Any, key: str = "") -> Any:
    """Expand ``${VAR}`` (and ``${VAR:-default}``) in every string of a YAML tree.

    Raises:
        ConfigError: naming the key when a referenced variable is not set.
    """
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            if name not in os.environ and default is not None:
                return default
            if name not in os.environ:
                raise ConfigError(key or "<root>", f"environment variable ${{{name}}} is not set")
            return os.environ[name]

        return _ENV_RE.sub(sub, value)
    if isinstance(value, dict):
        return {k: expand_env(v, f"{key}.{k}" if key else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, f"{key}[{i}]") for i, v in enumerate(value)]
    return value


def config_from_dict(raw: Any, check_models: bool = True) -> PipelineConfig:
    """Validate a parsed YAML mapping (see :func:`load_config`). ``check_models=False``
    skips the warning about a model the provider's SDK does not list (which imports
    the SDK's types, about a CPU second for openai), for commands that send nothing and
    may ask the provider nothing (``mmirage runs``); the settings a model family
    refuses are still refused.

    Raises:
        ConfigError: naming the offending key.
    """
    if not isinstance(raw, dict):
        raise ConfigError("<root>", "the config must be a YAML mapping")
    _check_keys(
        raw,
        "",
        {"processors", "loading_params", "processing_params", "execution_params"},
        strict=False,
    )
    for section in ("processors", "loading_params", "processing_params"):
        if section not in raw:
            raise ConfigError(section, "section is missing")
    _reject_secrets(raw.get("processors"), "processors")
    raw = expand_env(raw)
    processor, processor_key, given = _processor(raw["processors"], check_models)
    loading = _mapping(raw["loading_params"], "loading_params")
    _check_keys(
        loading,
        "loading_params",
        {"datasets", "num_shards", "shard_id", "state_dir", "batch_size"},
        strict=False,
    )
    processing = _mapping(raw["processing_params"], "processing_params")
    _check_keys(
        processing,
        "processing_params",
        {"inputs", "outputs", "output_schema", "remove_columns"},
        strict=False,
    )
    execution = _execution(raw.get("execution_params"))
    datasets = _datasets(loading.get("datasets"))
    num_shards = require_int("loading_params.num_shards", loading.get("num_shards", 1), 1)
    shard_id = _shard_id(loading.get("shard_id", 0))
    if shard_id >= num_shards:
        raise ConfigError(
            "loading_params.shard_id", f"{shard_id} must be < num_shards ({num_shards})"
        )
    batch_size = loading.get("batch_size")
    if batch_size is not None:
        batch_size = require_int("loading_params.batch_size", batch_size, 1)
    state_dir = loading.get("state_dir")
    if state_dir is not None and not isinstance(state_dir, str):
        raise ConfigError("loading_params.state_dir", f"must be a string path, got {state_dir!r}")
    inputs = _inputs(processing.get("inputs"))
    outputs = _outputs(processing.get("outputs"), {i.name for i in inputs})
    processor, outputs = _embedding_outputs(processor, processor_key, given, inputs, outputs)
    remove_columns = processing.get("remove_columns", False)
    if not isinstance(remove_columns, bool):
        raise ConfigError("processing_params.remove_columns", "must be true or false")
    output_schema = processing.get("output_schema")
    _check_templates(output_schema, "processing_params.output_schema")
    names = {i.name for i in inputs}
    for i, o in enumerate(outputs):
        _check_variables(o.prompt, f"processing_params.outputs[{i}].prompt", names)
    _check_variables(
        output_schema, "processing_params.output_schema", names | {o.name for o in outputs}
    )
    _check_json_fields(output_schema, "processing_params.output_schema", outputs)
    return PipelineConfig(
        processor=processor,
        datasets=datasets,
        inputs=inputs,
        outputs=outputs,
        output_schema=output_schema,
        remove_columns=remove_columns,
        num_shards=num_shards,
        shard_id=shard_id,
        state_dir=state_dir,
        batch_size=batch_size,
        execution=execution,
    )


def _check_keys(mapping: dict, key: str, known: set[str], strict: bool) -> None:
    """Unknown keys: an error when ``strict`` or when one is a likely typo of a known key
    (so ``output_tpye`` never silently becomes a plain output); otherwise a warning
    (MMIRAGE configs may carry keys of other modes)."""
    import difflib

    for k in mapping:
        if k in known:
            continue
        close = difflib.get_close_matches(str(k), sorted(known), n=1, cutoff=0.75)
        where = f"{key}.{k}" if key else str(k)
        if strict or close:
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(where, f"unknown key; {hint}accepted: {', '.join(sorted(known))}")
        _LOG.warning("config key %s is not used by mmirage-beam and is ignored", where)


def _reject_secrets(value: Any, key: str) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{key}.{k}"
            if isinstance(k, str) and _SECRET_KEY_RE.match(k):
                raise ConfigError(
                    sub,
                    "API keys and tokens are never read from the config; remove this key and "
                    "set the provider's environment variable (<PROVIDER>_API_KEY) instead",
                )
            _reject_secrets(v, sub)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _reject_secrets(v, f"{key}[{i}]")


def _mapping(value: Any, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(key, "must be a mapping")
    return value


def _shard_id(value: Any) -> int:
    key = "loading_params.shard_id"
    if isinstance(value, str) and value.startswith("$"):
        var = value[1:].strip("{}")
        if var not in os.environ:
            raise ConfigError(key, f"environment variable {var} is not set")
        value = os.environ[var]
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ConfigError(key, f"must be an integer or $ENV_VAR, got {value!r}") from None
    return require_int(key, value, 0)


def _processor(
    value: Any, check_models: bool = True
) -> tuple[BatchProviderConfig, str, frozenset[str]]:
    """The ``batch_api`` processor's config, its YAML key (``processors[i]``) and the
    keys its block sets.

    Raises:
        ConfigError: naming the key.
    """
    if not isinstance(value, list) or not value:
        raise ConfigError("processors", "must be a non-empty list")
    batch = [
        (i, p) for i, p in enumerate(value) if isinstance(p, dict) and p.get("type") == "batch_api"
    ]
    if not batch:
        raise ConfigError("processors", "no processor with type: batch_api")
    if len(batch) > 1:
        raise ConfigError(f"processors[{batch[1][0]}]", "only one batch_api processor is supported")
    i, block = batch[0]
    key = f"processors[{i}]"
    if "provider" not in block:
        raise ConfigError(
            f"{key}.provider",
            "is required; registered: " + ", ".join(BatchProviderConfigRegistry.names()),
        )
    if not isinstance(block["provider"], str):
        raise ConfigError(
            f"{key}.provider",
            "must be a provider name (registered: "
            + ", ".join(BatchProviderConfigRegistry.names())
            + f"), got {block['provider']!r}",
        )
    try:
        cls = BatchProviderConfigRegistry.get(block["provider"])
    except ConfigError as exc:
        raise exc.under(key) from None
    kwargs = {k: v for k, v in block.items() if k != "type"}
    unknown = sorted((k for k in kwargs if k not in cls.field_names()), key=str)
    if unknown:
        import difflib

        close = (
            difflib.get_close_matches(unknown[0], sorted(cls.field_names()), n=1, cutoff=0.75)
            if isinstance(unknown[0], str)
            else []
        )
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(
            f"{key}.{unknown[0]}",
            f"unknown field for provider {block['provider']!r}; {hint}accepted: "
            + ", ".join(sorted(cls.field_names())),
        )
    try:
        config = cls(**kwargs)
    except ConfigError as exc:
        raise exc.under(key) from None
    except (TypeError, ValueError) as exc:  # a plugin's own __post_init__ checks
        raise ConfigError(key, str(exc)) from None
    # The model and parameter rules the services apply (the fake provider's table too):
    # an unlisted model is warned about, a setting the model family refuses is refused.
    for message in model_rules.check_config(
        config.MODEL_RULES, getattr(config, "model", None), kwargs, key, check_models
    ):
        if message not in _WARNED:  # a command may load its config twice: said once
            _WARNED.add(message)
            _LOG.warning("%s", message)
    return config, key, frozenset(str(k) for k in kwargs)


def _embedding_outputs(
    processor: BatchProviderConfig,
    processor_key: str,
    given: frozenset[str],
    inputs: tuple[InputConfig, ...],
    outputs: tuple[OutputConfig, ...],
) -> tuple[BatchProviderConfig, tuple[OutputConfig, ...]]:
    """The processor and outputs checked for ``output_type: embedding``: one processor
    has one model, so its outputs are all embeddings or none; an embedding output embeds
    text only; the processor fits its outputs' kind
    (:meth:`~mmirage_beam.providers.config.BatchProviderConfig.for_outputs`), and each
    embedding output carries the processor's ``dimensions``.

    Raises:
        ConfigError: naming the key: an output whose type differs from the first's, an
            embedding prompt using an image input, a processor key that does not fit.
    """
    import jinja2
    from jinja2 import meta

    embedding = bool(outputs) and outputs[0].output_type == EMBEDDING
    for i, o in enumerate(outputs):
        if (o.output_type == EMBEDDING) != embedding:
            raise ConfigError(
                f"processing_params.outputs[{i}].output_type",
                f"{o.output_type!r} mixes with {outputs[0].output_type!r} (outputs[0]): a "
                "processor has one model, so its outputs are all embedding or none",
            )
        if not embedding:
            continue
        used = meta.find_undeclared_variables(jinja2.Environment().parse(o.prompt))
        images = sorted(used & {x.name for x in inputs if x.type == "image"})
        if images:
            raise ConfigError(
                f"processing_params.outputs[{i}].prompt",
                f"uses the image input {images[0]!r}; an embedding output embeds text only",
            )
    try:
        processor = processor.for_outputs(embedding, given)
    except ConfigError as exc:
        raise exc.under(processor_key) from None
    if embedding:
        outputs = tuple(dataclasses.replace(o, dimensions=processor.dimensions) for o in outputs)
    return processor, outputs


def _list_entries(value: Any, key: str) -> list[tuple[str, Any]]:
    """The entries of the YAML list at ``key``, each with its own key (``key[i]``).

    Raises:
        ConfigError: ``value`` is not a list, or is empty.
    """
    if not isinstance(value, list) or not value:
        raise ConfigError(key, "must be a non-empty list")
    return [(f"{key}[{i}]", d) for i, d in enumerate(value)]


def _datasets(value: Any) -> tuple[DatasetConfig, ...]:
    out = []
    for k, d in _list_entries(value, "loading_params.datasets"):
        if not isinstance(d, dict):
            raise ConfigError(k, "must be a mapping with path, type, output_dir")
        _check_keys(
            d,
            k,
            {"path", "type", "output_dir", "image_base_path", "allow_images_outside_base"},
            strict=False,
        )
        if not isinstance(d.get("path"), str) or not d["path"]:
            raise ConfigError(f"{k}.path", "is required")
        t = d.get("type")
        if not isinstance(t, str) or t.lower() not in DATASET_TYPES:
            raise ConfigError(f"{k}.type", f"must be one of JSONL, loadable, parquet, got {t!r}")
        ibp = d.get("image_base_path")
        if ibp is not None and not isinstance(ibp, str):
            raise ConfigError(f"{k}.image_base_path", "must be a string path")
        output_dir = d.get("output_dir")
        if output_dir is not None and not isinstance(output_dir, str):
            raise ConfigError(f"{k}.output_dir", f"must be a string path, got {output_dir!r}")
        outside = d.get("allow_images_outside_base", False)
        if not isinstance(outside, bool):
            raise ConfigError(f"{k}.allow_images_outside_base", "must be true or false")
        out.append(
            DatasetConfig(
                path=d["path"],
                type=DATASET_TYPES[t.lower()],
                output_dir=output_dir or "",
                image_base_path=ibp,
                allow_images_outside_base=outside,
            )
        )
    return tuple(out)


def _inputs(value: Any) -> tuple[InputConfig, ...]:
    import jmespath

    out, seen = [], set()
    for k, d in _list_entries(value, "processing_params.inputs"):
        if isinstance(d, dict):
            _check_keys(d, k, {"name", "key", "type", "default"}, strict=True)
        if not isinstance(d, dict) or not isinstance(d.get("name"), str) or not d["name"]:
            raise ConfigError(f"{k}.name", "is required")
        if d["name"] in seen:
            raise ConfigError(f"{k}.name", f"duplicate input name {d['name']!r}")
        seen.add(d["name"])
        if not d["name"].isidentifier():
            raise ConfigError(f"{k}.name", f"{d['name']!r} must be a valid template variable name")
        expr = d.get("key", d["name"])
        if not isinstance(expr, str) or not expr:
            raise ConfigError(f"{k}.key", "must be a JMESPath expression")
        try:
            jmespath.compile(expr)
        except jmespath.exceptions.JMESPathError as exc:
            raise ConfigError(f"{k}.key", f"invalid JMESPath {expr!r}: {exc}") from None
        t = d.get("type", "text")
        if t not in INPUT_TYPES:
            raise ConfigError(f"{k}.type", f"must be text or image, got {t!r}")
        out.append(
            InputConfig(
                name=d["name"],
                key=expr,
                type=t,
                default=d.get("default"),
                has_default="default" in d,
            )
        )
    return tuple(out)


def _outputs(value: Any, input_names: set[str]) -> tuple[OutputConfig, ...]:
    out, seen = [], set()
    for k, d in _list_entries(value, "processing_params.outputs"):
        if not isinstance(d, dict):
            raise ConfigError(k, "must be a mapping")
        _check_keys(d, k, {"name", "type", "output_type", "prompt", "output_schema"}, strict=True)
        name = d.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{k}.name", "is required")
        if not OUTPUT_NAME_RE.match(name):
            raise ConfigError(
                f"{k}.name",
                f"{name!r} may only use A-Z, a-z, 0-9, '_' and '-' (it is part of every custom_id)",
            )
        if name in seen:
            raise ConfigError(f"{k}.name", f"duplicate output name {name!r}")
        if name in input_names:
            raise ConfigError(f"{k}.name", f"{name!r} is also an input name")
        seen.add(name)
        if d.get("type", "batch_api") != "batch_api":
            raise ConfigError(f"{k}.type", f"must be batch_api, got {d.get('type')!r}")
        prompt = d.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ConfigError(f"{k}.prompt", "must be a non-empty Jinja2 template")
        _check_templates(prompt, f"{k}.prompt")
        ot = d.get("output_type", "plain")
        if ot not in OUTPUT_TYPES:
            raise ConfigError(f"{k}.output_type", f"must be plain, JSON or embedding, got {ot!r}")
        schema = d.get("output_schema")
        if ot == EMBEDDING and schema is not None:
            raise ConfigError(
                f"{k}.output_schema", "is for JSON outputs; an embedding output is a vector"
            )
        if ot == "JSON":
            if schema is None:
                raise ConfigError(f"{k}.output_schema", "is required for output_type: JSON")
            try:
                json_schema_for(schema)
            except ConfigError as exc:
                raise exc.under(f"{k}.output_schema") from None
        out.append(OutputConfig(name=name, prompt=prompt, output_type=ot, output_schema=schema))
    return tuple(out)


def _execution(value: Any) -> ExecutionConfig:
    """``execution_params`` (absent or empty: the defaults)."""
    e = _mapping({} if value is None else value, "execution_params")
    mode = e.get("mode", "local")
    if mode not in ("local", "slurm"):
        raise ConfigError("execution_params.mode", f"must be local (or slurm), got {mode!r}")
    flags = {}
    for name, default in (("merge", False), ("skip_invalid_rows", False), ("reuse_answers", True)):
        flags[name] = e.get(name, default)
        if not isinstance(flags[name], bool):
            # bool("false") is True: a quoted value must never turn a switch on.
            raise ConfigError(
                f"execution_params.{name}", f"must be true or false, got {flags[name]!r}"
            )
    parallelism = e.get("chunking_parallelism")
    if parallelism is not None:
        parallelism = require_int("execution_params.chunking_parallelism", parallelism, 1)
    concurrency = require_int(
        "execution_params.submit_concurrency", e.get("submit_concurrency", 4), 1
    )
    retry = e.get("retry", False)
    if not isinstance(retry, bool):  # a count (a quoted "false" is refused too)
        retry = require_int("execution_params.retry", retry, 0)
    merge_output_path = e.get("merge_output_path")
    if merge_output_path is not None and (
        not isinstance(merge_output_path, str) or not merge_output_path.strip()
    ):
        raise ConfigError("execution_params.merge_output_path", "must be a path (a string)")
    own = (
        "mode",
        "retry",
        "merge",
        "merge_output_path",
        "skip_invalid_rows",
        "chunking_parallelism",
        "submit_concurrency",
        "reuse_answers",
        "notify",
    )
    _check_keys(e, "execution_params", set(own), strict=False)
    notify = _notify(e.get("notify"))
    extra = {k: v for k, v in e.items() if k not in own}
    return ExecutionConfig(
        mode=mode,
        retry=retry,
        merge=flags["merge"],
        merge_output_path=merge_output_path,
        skip_invalid_rows=flags["skip_invalid_rows"],
        chunking_parallelism=parallelism,
        submit_concurrency=concurrency,
        reuse_answers=flags["reuse_answers"],
        notify=notify,
        extra=extra,
    )


_NOTIFY_KEYS = {"url", "events", "format", "secret_env"}
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _notify(value: Any) -> tuple[NotifyTarget, ...]:
    """``execution_params.notify``: a list of webhooks, each checked here, when the config
    is loaded, so that a notify mistake never surfaces after the batches were paid for.

    Raises:
        ConfigError: naming ``execution_params.notify[i].<key>``: an unknown key (with
            "did you mean"), a URL that is not http(s), an unknown event or format, a
            ``secret_env`` that is not a variable name (whether it is set is checked by
            ``mmirage run``: :func:`check_notify_secrets`).
    """
    from urllib.parse import urlsplit

    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(
            "execution_params.notify", "must be a list of webhooks ({url, events, format})"
        )
    targets = []
    for i, item in enumerate(value):
        key = f"execution_params.notify[{i}]"
        if isinstance(item, str):
            item = {"url": item}
        if not isinstance(item, dict):
            raise ConfigError(key, "must be a mapping {url, events, format, secret_env}")
        _check_keys(item, key, _NOTIFY_KEYS, strict=True)
        url = item.get("url")
        if url is None:
            raise ConfigError(f"{key}.url", "is required (the webhook's http(s) URL)")
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            # the URL itself is not echoed: a webhook's path is often its secret
            if parts is None:
                got = f"a {type(url).__name__}"
            elif parts.scheme not in ("http", "https"):
                got = f"scheme {parts.scheme!r}" if parts.scheme else "no scheme"
            else:
                got = "no host"
            raise ConfigError(f"{key}.url", f"must be an http:// or https:// URL, got {got}")
        events = item.get("events", list(NOTIFY_EVENTS))
        if isinstance(events, str):
            events = [events]
        if not isinstance(events, list) or not events:
            raise ConfigError(
                f"{key}.events", f"must be a non-empty list of: {', '.join(NOTIFY_EVENTS)}"
            )
        for j, ev in enumerate(events):
            if ev not in NOTIFY_EVENTS:
                _unknown_word(f"{key}.events[{j}]", ev, NOTIFY_EVENTS, "event")
        fmt = item.get("format", "json")
        if fmt not in NOTIFY_FORMATS:
            _unknown_word(f"{key}.format", fmt, NOTIFY_FORMATS, "format")
        secret_env = item.get("secret_env")
        if secret_env is not None:
            if not isinstance(secret_env, str) or not _ENV_NAME_RE.match(secret_env):
                raise ConfigError(
                    f"{key}.secret_env",
                    f"must name an environment variable (not hold the secret), got "
                    f"{'a non-name string' if isinstance(secret_env, str) else repr(secret_env)}",
                )
        targets.append(
            NotifyTarget(
                url=url,
                events=tuple(e for e in NOTIFY_EVENTS if e in events),
                format=fmt,
                secret_env=secret_env,
            )
        )
    return tuple(targets)


def _unknown_word(key: str, word: Any, known: tuple[str, ...], what: str) -> None:
    """Raise the "did you mean" error of an unknown ``what`` (event, format) at ``key``."""
    import difflib

    close = difflib.get_close_matches(str(word), known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ConfigError(key, f"unknown {what} {word!r}; {hint}accepted: {', '.join(known)}")


def _yaml_strings(value: Any, key: str) -> Iterator[tuple[str, str]]:
    """Every string in a parsed YAML tree, depth first, with the YAML key naming it.

    Args:
        value: a parsed YAML value: a ``str``, a ``dict`` or ``list`` of such values, or
            anything else (a number, a bool, None: no string in it).
        key: the YAML key of ``value``; a mapping's entry is named ``key.k``, a list's
            item ``key[i]``.

    Yields:
        ``(string, its key)`` for every ``str`` in ``value``, in document order.
    """
    if isinstance(value, str):
        yield value, key
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _yaml_strings(v, f"{key}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _yaml_strings(v, f"{key}[{i}]")


def _check_templates(value: Any, key: str) -> None:
    """Parse every Jinja2 template in a tree so syntax errors surface at load time."""
    import jinja2

    for text, at in _yaml_strings(value, key):
        try:
            jinja2.Environment().parse(text)
        except jinja2.TemplateSyntaxError as exc:
            raise ConfigError(
                at, f"Jinja2 syntax error: {exc.message} (line {exc.lineno})"
            ) from None


def _check_variables(value: Any, key: str, known: set[str]) -> None:
    """Every top-level template variable must be an input (or output) name."""
    import jinja2
    from jinja2 import meta

    for text, at in _yaml_strings(value, key):
        if "{" not in text:
            continue
        used = meta.find_undeclared_variables(jinja2.Environment().parse(text))
        unknown = sorted(used - known)
        if unknown:
            raise ConfigError(
                at,
                f"uses undefined variable {unknown[0]!r}; defined: {', '.join(sorted(known))}",
            )


def _check_json_fields(value: Any, key: str, outputs: tuple[OutputConfig, ...]) -> None:
    """``{{ answer.field }}`` of a JSON output must name a field of its output_schema, so
    a typo fails now, not at merge after the batches are paid for."""
    import jinja2
    from jinja2 import nodes

    fields = {
        o.name: set(json_schema_for(o.output_schema)["properties"])
        for o in outputs
        if o.output_type == "JSON"
    }
    if not fields:
        return
    for text, at in _yaml_strings(value, key):
        if "{" not in text:
            continue
        ast = jinja2.Environment().parse(text)
        for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
            target = node.node
            if not (isinstance(target, nodes.Name) and target.name in fields):
                continue
            if isinstance(node, nodes.Getattr):
                attr = node.attr
            elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
                attr = node.arg.value
            else:
                continue
            if attr not in fields[target.name]:
                raise ConfigError(
                    at,
                    f"{target.name}.{attr}: output {target.name!r} has no field {attr!r}; "
                    f"its output_schema declares {', '.join(sorted(fields[target.name]))}",
                )


def check_notify_secrets(config: PipelineConfig, environ: Any = None) -> None:
    """Every ``execution_params.notify`` entry's ``secret_env`` variable is set. Checked
    by ``mmirage run`` before anything is read or sent (a run whose end could not be
    signed is refused at once), not at config load: ``check``, ``runs``, ``cancel`` and
    the dashboard read the same config from shells that need not hold the secret (their
    deliveries without it are warnings).

    Raises:
        ConfigError: naming ``execution_params.notify[i].secret_env``.
    """
    env = os.environ if environ is None else environ
    for i, target in enumerate(getattr(config.execution, "notify", ()) or ()):
        if target.secret_env and not env.get(target.secret_env):
            raise ConfigError(
                f"execution_params.notify[{i}].secret_env",
                f"environment variable {target.secret_env} is not set (it holds the "
                "webhook's signing secret)",
            )
