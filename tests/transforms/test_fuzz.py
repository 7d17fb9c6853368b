"""Inputs fuzzed, not just tried (issue 18, item 6): hypothesis-generated configs, dataset
files and provider result lines against the real loader, readers and result parsers.

Three targets, each with a fixed example budget (``FUZZ_EXAMPLES``) and hypothesis'
``derandomize=True`` (the examples are a function of the test alone, so CI is
reproducible) and no example database (nothing is written under the repository):

* **the config loader**: YAML built from the real keys with wrong types, unknown keys,
  missing sections, unicode, raw text and bytes. Always a ``ConfigError`` (exit 2) whose
  key names a place in the YAML, in one line; never another exception.
* **the readers** (JSONL, Parquet, HF ``save_to_disk``): random bytes, odd schemas,
  nested nulls. Every row comes out exactly once, valid or an invalid row naming its
  source_index: rows out = valid + invalid = rows (non-blank lines) in.
* **the result parsers** (OpenAI chat completions and Responses, Anthropic): random,
  mutated and truncated result lines. Always a typed outcome, never an exception.

The shrunk failures the fuzzers found are kept below as plain regression tests
(``test_regression_*``), so they run whatever the fuzzers draw.

Environment switch: ``MMIRAGE_FUZZ_SCALE=N`` (default 1) multiplies every example budget,
for a deeper run by hand (``MMIRAGE_FUZZ_SCALE=20 python -m pytest tests/transforms/test_fuzz.py``).
The readers are driven through their DoFns in-process (the counting pass, the offsets,
the reading pass, splits in shuffled order), which is what makes hundreds of examples
affordable; ``test_readers.py`` covers the same DoFns wired in a real pipeline.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from mmirage_beam.config import PipelineConfig, load_config
from mmirage_beam.config.loader import config_from_dict
from mmirage_beam.errors import ConfigError
from tests.conftest import base_config
from tests.runners import clean_env

SCALE = max(1, int(os.environ.get("MMIRAGE_FUZZ_SCALE", "1") or 1))


def fuzz_settings(max_examples: int) -> settings:
    """The settings of every fuzz test: a fixed budget, reproducible, no database."""
    return settings(
        max_examples=max_examples * SCALE,
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


#: examples per fuzz test (times MMIRAGE_FUZZ_SCALE); reported in the issue.
FUZZ_EXAMPLES = {
    "config_single_key": 300,
    "config_mutations": 250,
    "config_raw_text": 150,
    "jsonl": 200,
    "parquet": 120,
    "hf": 100,
    "result_lines": 400,
    "result_files": 60,
}

# ======================================================================================
# 1. The config loader
# ======================================================================================


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def _opt(pred: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or pred(v)


def _anything(_: Any) -> bool:
    return True


def _str_map(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and _is_str(x) for k, x in v.items())


#: Every key the loader reads, with the types it must accept; a value of another type
#: must be a ConfigError naming the key. Paths use the loader's own notation.
_PROCESSOR = {
    "type": _is_str,
    "provider": _is_str,
    "model": _is_str,
    "max_chunk_bytes": _is_int,
    "max_requests_per_chunk": _opt(_is_int),
    "metadata_output_path": _is_str,
    "oversized_request_policy": _is_str,
    "price_per_million_input_tokens": _opt(_is_num),
    "price_per_million_output_tokens": _opt(_is_num),
    "max_enqueued_tokens": _opt(_is_int),
    "exact_tokens": _is_bool,
    "base_url": _opt(_is_str),
    "temperature": _opt(_is_num),
    "top_p": _opt(_is_num),
    "timeout_seconds": _opt(_is_num),
}
_OPENAI = {
    **_PROCESSOR,
    "batch_endpoint": _is_str,
    "completion_window": _is_str,
    "metadata": _str_map,
    "max_tokens": _opt(_is_int),
    "image_detail": _opt(_is_str),
}
_ANTHROPIC = {**_PROCESSOR, "max_tokens": _is_int}
_SECTIONS = {
    "loading_params": lambda v: isinstance(v, dict),
    "processing_params": lambda v: isinstance(v, dict),
    "processors": lambda v: isinstance(v, list),
    "execution_params": _opt(lambda v: isinstance(v, dict)),
}
_OTHER_KEYS = {
    "loading_params.datasets": lambda v: isinstance(v, list),
    "loading_params.num_shards": _is_int,
    "loading_params.shard_id": lambda v: _is_int(v) or _is_str(v),
    "loading_params.state_dir": _opt(_is_str),
    "loading_params.batch_size": _opt(_is_int),
    "loading_params.datasets[0]": lambda v: isinstance(v, dict),
    "loading_params.datasets[0].path": _is_str,
    "loading_params.datasets[0].type": _is_str,
    "loading_params.datasets[0].output_dir": _opt(_is_str),
    "loading_params.datasets[0].image_base_path": _opt(_is_str),
    "processing_params.inputs": lambda v: isinstance(v, list),
    "processing_params.outputs": lambda v: isinstance(v, list),
    "processing_params.output_schema": _anything,
    "processing_params.remove_columns": _is_bool,
    "processing_params.inputs[0]": lambda v: isinstance(v, dict),
    "processing_params.inputs[0].name": _is_str,
    "processing_params.inputs[0].key": _is_str,
    "processing_params.inputs[0].type": _is_str,
    "processing_params.inputs[0].default": _anything,
    "processing_params.outputs[0]": lambda v: isinstance(v, dict),
    "processing_params.outputs[0].name": _is_str,
    "processing_params.outputs[0].type": _is_str,
    "processing_params.outputs[0].output_type": _is_str,
    "processing_params.outputs[0].prompt": _is_str,
    "processing_params.outputs[0].output_schema": _anything,
    "execution_params.mode": _is_str,
    "execution_params.retry": lambda v: _is_bool(v) or _is_int(v),  # a count (run --wait)
    "execution_params.merge": _is_bool,
    "execution_params.merge_output_path": _opt(_is_str),
    "execution_params.skip_invalid_rows": _is_bool,
    "execution_params.chunking_parallelism": _opt(_is_int),
    "execution_params.submit_concurrency": _is_int,
}


def _known_keys(provider: str) -> dict[str, Callable[[Any], bool]]:
    proc = _OPENAI if provider == "openai" else _ANTHROPIC
    keys = dict(_SECTIONS)
    keys.update({f"processors[0].{k}": p for k, p in proc.items()})
    keys.update(_OTHER_KEYS)
    return keys


def _split_path(path: str) -> list[Any]:
    """``a.b[0].c`` -> ``["a", "b", 0, "c"]`` (paths of _known_keys only)."""
    out: list[Any] = []
    for part in path.split("."):
        m = re.fullmatch(r"([^\[]+)((?:\[\d+\])*)", part)
        assert m, path
        out.append(m.group(1))
        out.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
    return out


def _set(tree: Any, path: list[Any], value: Any) -> bool:
    """Set (or, for value ``_DELETE``, delete) ``path`` in ``tree``; False if unreachable."""
    node = tree
    for p in path[:-1]:
        if isinstance(p, int):
            if not isinstance(node, list) or p >= len(node):
                return False
        elif not isinstance(node, dict) or p not in node:
            return False
        node = node[p]
    last = path[-1]
    if isinstance(last, int) and not (isinstance(node, list) and last < len(node)):
        return False
    if not isinstance(last, int) and not isinstance(node, dict):
        return False
    if value is _DELETE:
        if isinstance(last, int) or last in node:
            del node[last]
        return True
    node[last] = value
    return True


_DELETE = object()


def _tree_paths(value: Any, key: str = "") -> set[str]:
    """Every node of a YAML tree, named as the loader names keys (``a.b[0].c``)."""
    out = {key}
    if isinstance(value, dict):
        for k, v in value.items():
            out |= _tree_paths(v, f"{key}.{k}" if key else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out |= _tree_paths(v, f"{key}[{i}]")
    return out


def _names_a_place(key: str, raw: Any) -> bool:
    """An error key names a node of the YAML, a missing key of a node, or the file."""
    if key in ("<root>", "--config"):
        return True
    paths = _tree_paths(raw)
    if key in paths:
        return True
    for p in paths:
        rest = key[len(p) + 1 :] if p else key
        if (not p or key.startswith(p + ".")) and re.fullmatch(r"[a-z_]+", rest):
            return True
    return False


def _related(key: str, path: str) -> bool:
    """``key`` is ``path``, below it, or (for a node that decides which block counts,
    e.g. ``processors[0].type``) the list holding it."""
    return key == path or key.startswith((path + ".", path + "[")) or path.startswith(key + "[")


def _check_config_error(exc: ConfigError, raw: Any) -> None:
    assert isinstance(exc.key, str) and exc.key, exc
    assert len(str(exc).splitlines()) == 1, f"not one line: {str(exc)!r}"
    if str(exc.key).isprintable():
        assert str(exc).startswith(f"{exc.key}: "), str(exc)
    assert _names_a_place(exc.key, raw), f"{exc.key!r} names nothing in the config: {exc}"


_REAL_WORDS = sorted(
    {seg for k in _known_keys("openai") for seg in _split_path(k) if isinstance(seg, str)}
    | {"JSON", "plain", "text", "image", "batch_api", "openai", "anthropic", "24h", "local"}
)
_TRICKY_TEXT = st.sampled_from(
    [
        "",
        " ",
        "false",
        "true",
        "no",
        "0",
        "1.5",
        "-1",
        "$SHARD",
        "${FUZZ_UNSET_VAR}",
        "${FUZZ_UNSET_VAR:-}",
        "{{ question }}",
        "{{ nope }}",
        "{{",
        "{% if %}",
        "{{ answer.missing }}",
        "é’🙂",
        "\u202e\u2028x",
        "a\nb",
        "\x00",
        "~/x",
        "gs://b/x",
        "/v1/responses",
        "/v1/embeddings",
        "[[",
        "a.b",
        "question",
        "answer",
    ]
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-3, max_value=3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    _TRICKY_TEXT,
    st.sampled_from(_REAL_WORDS),
)
_KEYS = st.one_of(
    st.text(max_size=10),
    st.sampled_from(_REAL_WORDS),
    st.integers(min_value=-3, max_value=3),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=True),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(_KEYS, c, max_size=3),
    max_leaves=6,
)


def _dump(raw: Any) -> str:
    return yaml.safe_dump(raw, sort_keys=False, allow_unicode=True)


def _load_via_file(text: str | bytes, raw_for_check: Any) -> Optional[PipelineConfig]:
    """``load_config`` on a file holding ``text``: the config, or None after checking
    the ConfigError. Any other exception fails the test."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "config.yaml"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        try:
            return load_config(path)
        except ConfigError as exc:
            _check_config_error(exc, raw_for_check)
            raise


def _base(provider: str) -> dict[str, Any]:
    return base_config(Path("/tmp/mmirage-fuzz"), provider)


@fuzz_settings(FUZZ_EXAMPLES["config_single_key"])
@given(
    provider=st.sampled_from(["openai", "anthropic"]),
    key=st.sampled_from(sorted(_known_keys("openai").keys() | _known_keys("anthropic").keys())),
    value=_VALUES,
)
@example(provider="openai", key="execution_params.retry", value="false")
@example(provider="openai", key="loading_params.datasets[0].output_dir", value=[1])
@example(provider="anthropic", key="processors[0].provider", value=["anthropic"])
@example(provider="openai", key="loading_params.state_dir", value=3)
@example(provider="openai", key="execution_params", value=[])
def test_fuzz_config_one_key_of_a_wrong_type(provider, key, value):
    """One real key set to a random value: a value of the wrong type is a ConfigError
    naming that key (or a key below it); any value is a config or a ConfigError."""
    known = _known_keys(provider)
    assume(key in known)
    raw = _base(provider)
    assert _set(raw, _split_path(key), value)
    text = _dump(raw)
    seen = yaml.safe_load(text)  # what the loader sees (YAML may normalise a value)
    node: Any = seen
    for p in _split_path(key):
        node = node[p]
    try:
        _load_via_file(text, seen)
    except ConfigError as exc:
        if not known[key](node):
            assert _related(exc.key, key), f"{key}={node!r}: the error names {exc.key!r}: {exc}"
        return
    assert known[key](node), f"{key}: {node!r} (a {type(node).__name__}) was accepted"


_MUTATIONS = ("delete", "set", "unknown_key", "typo_key", "wrong_section", "unicode")


@st.composite
def _mutated_config(draw: st.DrawFn) -> dict[str, Any]:
    provider = draw(st.sampled_from(["openai", "anthropic"]))
    raw = _base(provider)
    known = sorted(_known_keys(provider))
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(_MUTATIONS))
        key = draw(st.sampled_from(known))
        path = _split_path(key)
        if how == "delete":
            _set(raw, path, _DELETE)
        elif how == "set":
            _set(raw, path, draw(_VALUES))
        elif how in ("unknown_key", "typo_key"):
            parent = path[:-1]
            node: Any = raw
            ok = True
            for p in parent:
                try:
                    node = node[p]
                except (KeyError, IndexError, TypeError):
                    ok = False
                    break
            if not ok or not isinstance(node, dict):
                continue
            word = path[-1] if isinstance(path[-1], str) else "x"
            if how == "typo_key":
                i = draw(st.integers(0, max(len(word) - 2, 0)))
                word = (
                    word[:i]
                    + draw(st.sampled_from(["", "x", word[i : i + 2][::-1]]))
                    + (word[i + 2 :] if len(word) > i + 1 else "")
                )
                new_key: Any = word
            else:
                new_key = draw(_KEYS)
            node[new_key] = draw(_VALUES)
        elif how == "wrong_section":
            section = draw(st.sampled_from(sorted(_SECTIONS)))
            raw[section] = draw(_SCALARS | st.lists(_SCALARS, max_size=2))
        else:  # unicode in a string value
            _set(raw, path, draw(st.text(min_size=1, max_size=8)))
    return raw


@fuzz_settings(FUZZ_EXAMPLES["config_mutations"])
@given(raw=_mutated_config())
def test_fuzz_config_mutations(raw):
    """Several keys deleted, set to random values, misspelt or added, sections replaced:
    a config or a one-line ConfigError naming a place in the YAML."""
    text = _dump(raw)
    seen = yaml.safe_load(text)
    try:
        _load_via_file(text, seen)
    except ConfigError:
        pass


@fuzz_settings(FUZZ_EXAMPLES["config_raw_text"])
@given(
    how=st.sampled_from(["text", "bytes", "cut", "flip"]),
    text=st.text(max_size=60),
    blob=st.binary(max_size=60),
    cut=st.floats(0, 1),
    flip=st.integers(0, 255),
)
@example(how="bytes", text="", blob=b"\xff\xfe: x\n", cut=0.0, flip=0)
@example(how="text", text="processors: [1\n", blob=b"", cut=0.0, flip=0)
def test_fuzz_config_raw_text(how, text, blob, cut, flip):
    """Whatever the file holds (random text, random bytes, a valid config cut short or
    with one byte changed): a config or a one-line ConfigError, never a traceback."""
    valid = _dump(_base("openai")).encode("utf-8")
    if how == "text":
        content: bytes = text.encode("utf-8")
    elif how == "bytes":
        content = blob
    elif how == "cut":
        content = valid[: int(len(valid) * cut)]
    else:
        i = int((len(valid) - 1) * cut)
        content = valid[:i] + bytes([flip]) + valid[i + 1 :]
    try:
        _load_via_file(content, _yaml_or_none(content))
    except ConfigError:
        pass


def _yaml_or_none(content: bytes) -> Any:
    try:
        return yaml.safe_load(content.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError):
        return None


def test_fuzz_config_valid_base_loads():
    """The unmutated base of the fuzzers is a valid config (else they test nothing)."""
    for provider in ("openai", "anthropic"):
        assert isinstance(config_from_dict(_base(provider)), PipelineConfig)


def _openai_with(path: str, value: Any) -> dict[str, Any]:
    raw = _base("openai")
    assert _set(raw, _split_path(path), value)
    return raw


def _processor_with(**extra: Any) -> dict[str, Any]:
    raw = _base("openai")
    raw["processors"][0].update(extra)
    return raw


def _inputs_with(**extra: Any) -> dict[str, Any]:
    raw = _base("openai")
    raw["processing_params"]["inputs"][0].update(extra)
    return raw


#: Shrunk failures of the config fuzzers: (config text or bytes, key the error names).
#: Before the fixes, each was a traceback (TypeError, UnicodeDecodeError), a value of
#: the wrong type accepted (``bool("false")`` is True), or an error over several lines.
CONFIG_REGRESSIONS = {
    "not_utf8": (b"\xff\xfe: x\n", "--config"),
    "yaml_error_lines": ("@", "--config"),
    "yaml_nul": (b"\x00", "--config"),
    "retry_quoted_false": (_dump(_openai_with("execution_params.retry", "false")), None),
    "merge_int": (_dump(_openai_with("execution_params.merge", 1)), None),
    "execution_params_list": (_dump(_openai_with("execution_params", [])), None),
    "output_dir_list": (_dump(_openai_with("loading_params.datasets[0].output_dir", [1])), None),
    "state_dir_bool": (_dump(_openai_with("loading_params.state_dir", True)), None),
    "provider_list": (_dump(_openai_with("processors[0].provider", ["anthropic"])), None),
    "unknown_keys_int_and_str": ("", None),  # written by _regression_text
    "unknown_key_cr": (_dump(_inputs_with(**{"\r": None})), None),
    "jmespath_error_lines": (_dump(_inputs_with(key="(")), None),
}
CONFIG_REGRESSION_KEYS = {
    "retry_quoted_false": "execution_params.retry",
    "merge_int": "execution_params.merge",
    "execution_params_list": "execution_params",
    "output_dir_list": "loading_params.datasets[0].output_dir",
    "state_dir_bool": "loading_params.state_dir",
    "provider_list": "processors[0].provider",
    "unknown_keys_int_and_str": "processors[0].",
    "unknown_key_cr": "processing_params.inputs[0].\r",
    "jmespath_error_lines": "processing_params.inputs[0].key",
}


def _regression_text(name: str) -> tuple[str | bytes, str]:
    text, key = CONFIG_REGRESSIONS[name]
    if name == "unknown_keys_int_and_str":
        # an int key beside a str key (sorting them raised TypeError); YAML keeps both
        text = _dump(_base("openai")).replace(
            "  metadata_output_path:", "  0: null\n  '': null\n  metadata_output_path:", 1
        )
    return text, key or CONFIG_REGRESSION_KEYS[name]


@pytest.mark.parametrize("name", sorted(CONFIG_REGRESSIONS))
def test_regression_config_errors_name_the_key(name):
    text, key = _regression_text(name)
    with pytest.raises(ConfigError) as info:
        _load_via_file(text, _yaml_or_none(text if isinstance(text, bytes) else text.encode()))
    assert info.value.key == key, str(info.value)
    assert len(str(info.value).splitlines()) == 1


def test_regression_config_placeholder_keys_name_the_output_schema():
    """json_schema_for's ``<root>`` / ``<list>`` (the value as a whole) used to be glued
    onto the key: ``processing_params.outputs[0].output_schema.<root>``."""
    for schema in (5, [], [1]):
        raw = _base("openai")
        raw["processing_params"]["outputs"][0].update(output_type="JSON", output_schema=schema)
        with pytest.raises(ConfigError) as info:
            config_from_dict(raw)
        assert info.value.key == "processing_params.outputs[0].output_schema", str(info.value)


#: The shrunk examples also run through the CLI: exit 2, one line naming the key.
CLI_REGRESSIONS = ("not_utf8", "retry_quoted_false", "unknown_key_cr")


def test_regression_config_errors_through_the_cli(tmp_path):
    """``mmirage run`` on each shrunk example (all at once, one process each): exit 2,
    no traceback, and stderr is the one line ``mmirage: config error: <key>: ...``."""
    procs = {}
    for name in CLI_REGRESSIONS:
        text, _ = _regression_text(name)
        path = tmp_path / f"{name}.yaml"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        cmd = [sys.executable, "-m", "pipelines.cli", "run", "--config", str(path)]
        cmd += ["--export-prompts", str(tmp_path / f"{name}-prompts")]
        procs[name] = subprocess.Popen(
            cmd,
            cwd=tmp_path,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        key = _regression_text(name)[1].replace("\r", "\\r")
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert proc.returncode == 2, (name, proc.returncode, err)
        assert "Traceback" not in err, err
        assert len(lines) == 1 and lines[0].startswith(f"mmirage: config error: {key}: "), err
        assert not (tmp_path / f"{name}-prompts").exists()


# ======================================================================================
# 2. The readers
# ======================================================================================


def _read_in_process(
    datasets: list[Any], num_shards: int, desired_split_bytes: int, seed: int
) -> tuple[list[Any], list[Any]]:
    """Every shard of ``datasets`` read through ReadDatasets' own DoFns, in-process: the
    splits of the real transform, counted and read in a shuffled order (as a runner may),
    with the offsets of the real counting pass. Returns ``(rows, errors)`` of all shards."""
    from apache_beam.pvalue import TaggedOutput

    from mmirage_beam.io import ReadDatasets
    from mmirage_beam.io.readers import _compute_offsets, _CountSplitRowsFn, _ReadSplitFn

    rows, errors = [], []
    for shard_id in range(num_shards):
        read = ReadDatasets(datasets, num_shards, shard_id, desired_split_bytes)
        splits = list(read._splits)
        order = random.Random(seed + shard_id).sample(splits, len(splits))
        counts = [c for s in order for c in _CountSplitRowsFn().process(s)]
        offsets = _compute_offsets(counts, tuple(s.file_id for s in splits), num_shards, shard_id)
        fn = _ReadSplitFn(num_shards, shard_id)
        fn.start_bundle()
        for s in order:
            for out in fn.process(s, offsets):
                if isinstance(out, TaggedOutput):
                    assert out.tag == "errors"
                    errors.append(out.value)
                else:
                    rows.append(out)
        fn.finish_bundle()
    return rows, errors


def _check_exactly_once(rows: list[Any], errors: list[Any], n: int) -> None:
    """source_index 0..n-1 each exactly once, as a row or as an invalid row naming it."""
    indices = [r.source_index for r in rows] + [e.source_index for e in errors]
    assert all(isinstance(i, int) for i in indices), errors
    dup = sorted({i for i in indices if indices.count(i) > 1})
    assert not dup, f"read twice: {dup[:10]}"
    missing = sorted(set(range(n)) - set(indices))
    assert not missing, f"skipped silently: {missing[:10]}"
    assert len(indices) == n, (len(indices), n)
    for e in errors:
        assert isinstance(e.reason, str) and e.reason, e
    for r in rows:
        assert isinstance(r.row, dict)
        json.dumps(r.row, allow_nan=False)  # plain JSON (str keys, finite numbers)


_BOM = b"\xef\xbb\xbf"
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=8,
)
_ODD_LINES = st.sampled_from(
    [
        b"",
        b" ",
        b"\t",
        b"\r",
        b" \r",
        b"\x0c",
        b"\xef\xbb\xbf{}",
        b"{}",
        b"null",
        b"[]",
        b'"x"',
        b"1",
        b'{"a": NaN, "b": -Infinity, "c": 1e999}',
        b'{"a": "\\ud800"}',
        b'{"a": "\\ud83d\\ude00"}',
        b'{"a": "\xff"}',
        b'{"a": "\xe2\x80"}',
        b'{"a": 1}\x00',
        b'{"a": "\xe2\x80\xa8 \xc2\x85"}',  # raw U+2028 and U+0085 inside a string
        b'{"a": 1, "a": 2}',
        b"{" + b'"a":' * 3 + b"1",
        b"[" * 3000 + b"]" * 3000,
        b'{"n": ' + b"7" * 5000 + b"}",
        b'{"n": 1' + b"0" * 400 + b".5}",
    ]
)


@st.composite
def _jsonl_line(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["object", "value", "cut", "bytes", "odd", "spliced"]))
    obj = draw(st.dictionaries(st.text(max_size=4), _JSON, max_size=3))
    dumped = json.dumps(obj, ensure_ascii=draw(st.booleans())).encode("utf-8")
    if kind == "object":
        return dumped
    if kind == "value":
        return json.dumps(draw(_JSON)).encode("utf-8")
    if kind == "cut":
        return dumped[: draw(st.integers(0, max(len(dumped) - 1, 0)))]
    if kind == "bytes":
        return draw(st.binary(max_size=24))
    if kind == "odd":
        return draw(_ODD_LINES)
    i = draw(st.integers(0, len(dumped)))
    return dumped[:i] + draw(st.binary(min_size=1, max_size=3)) + dumped[i:]


def _jsonl_oracle(data: bytes) -> list[tuple[int, bytes]]:
    """``(physical line number, content)`` of every counted line, by the documented rule:
    split on ``\\n`` only, BOM dropped at the start, one ``\\r`` dropped at the end,
    whitespace-only lines (``bytes.strip()``) not counted."""
    physical = data.split(b"\n")
    if data.endswith(b"\n"):
        physical = physical[:-1]
    out = []
    for number, line in enumerate(physical, 1):
        if number == 1 and line.startswith(_BOM):
            line = line[len(_BOM) :]
        if line.endswith(b"\r"):
            line = line[:-1]
        if line.strip():
            out.append((number, line))
    return out


def _json_object(content: bytes) -> tuple[bool, Any]:
    def finite(text: str) -> Optional[float]:
        value = float(text)
        return value if math.isfinite(value) else None

    try:
        value = json.loads(
            content.decode("utf-8"), parse_float=finite, parse_constant=lambda _: None
        )
    except (ValueError, RecursionError):
        return False, None
    return isinstance(value, dict), value


def _write_jsonl_files(root: Path, files: list[bytes], gz: bool) -> tuple[str, list[Path]]:
    paths = []
    for i, data in enumerate(files):
        p = root / f"part-{i}.jsonl{'.gz' if gz else ''}"
        p.write_bytes(gzip.compress(data, mtime=0) if gz else data)
        paths.append(p)
    return (str(paths[0]) if len(paths) == 1 else str(root)), paths


@fuzz_settings(FUZZ_EXAMPLES["jsonl"])
@given(
    files=st.lists(
        st.tuples(
            st.lists(st.tuples(_jsonl_line(), st.sampled_from([b"\n", b"\r\n"])), max_size=10),
            st.booleans(),  # BOM
            st.booleans(),  # last line without its newline
        ),
        min_size=1,
        max_size=2,
    ),
    gz=st.booleans(),
    desired_split_bytes=st.integers(1, 48) | st.just(64 * 1024 * 1024),
    num_shards=st.integers(1, 3),
    seed=st.integers(0, 3),
)
def test_fuzz_jsonl_every_line_once_valid_or_named(
    files, gz, desired_split_bytes, num_shards, seed
):
    """JSONL files of random lines (objects, other JSON, cut JSON, random bytes, odd
    whitespace, BOMs, CRLF), cut into byte-range splits as small as one byte and read in
    1-3 shards: every counted line comes out once, as its row or as an invalid row that
    names its source_index and physical line."""
    blobs = []
    for lines, bom, open_end in files:
        data = (_BOM if bom else b"") + b"".join(line + sep for line, sep in lines)
        if open_end and lines:
            data = data[: -len(lines[-1][1])]
        blobs.append(data)
    _check_jsonl(blobs, gz, desired_split_bytes, num_shards, seed)


def _check_jsonl(
    blobs: list[bytes], gz: bool, desired_split_bytes: int, num_shards: int, seed: int
) -> None:
    from mmirage_beam.config.loader import DatasetConfig

    with tempfile.TemporaryDirectory() as d:
        path, paths = _write_jsonl_files(Path(d), blobs, gz)
        expected = []  # (source_index, location, content)
        for p, data in zip(paths, blobs):
            where = "" if str(p) == path else f" of {p}"
            for number, content in _jsonl_oracle(data):
                expected.append((len(expected), f"line {number}{where}", content))
        # at most ~40 splits a file: byte ranges of one byte on small files, not on 5 KB
        split_bytes = max(desired_split_bytes, max(map(len, blobs)) // 40)
        rows, errors = _read_in_process(
            [DatasetConfig(path, "JSONL")], num_shards, split_bytes, seed
        )
    _check_exactly_once(rows, errors, len(expected))
    by_index = {r.source_index: r for r in rows}
    errors_by_index = {e.source_index: e for e in errors}
    for index, location, content in expected:
        ok, value = _json_object(content)
        if _SURROGATE_ESCAPE.search(content):
            continue  # lone surrogates: their handling is decided elsewhere (issue 18, item 7)
        if ok:
            assert index in by_index, (content, errors_by_index.get(index))
            assert by_index[index].row == value, content
        else:
            assert index in errors_by_index, (content, by_index.get(index))
            e = errors_by_index[index]
            assert e.location == location, (e, location)
            assert e.dataset_path == path


def _leaf_types() -> st.SearchStrategy[tuple[Any, st.SearchStrategy[Any]]]:
    import datetime
    import decimal

    import pyarrow as pa

    utc = datetime.timezone.utc
    small_delta = st.timedeltas(
        min_value=datetime.timedelta(days=-9999), max_value=datetime.timedelta(days=9999)
    )
    leaves = [
        (pa.null(), st.none()),
        (pa.bool_(), st.booleans()),
        (pa.int8(), st.integers(-128, 127)),
        (pa.uint8(), st.integers(0, 255)),
        (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
        (pa.uint64(), st.integers(0, 2**64 - 1)),
        (pa.float32(), st.floats(width=32, allow_nan=True, allow_infinity=True)),
        (pa.float64(), st.floats(allow_nan=True, allow_infinity=True)),
        (pa.string(), st.text(max_size=5)),
        (pa.large_string(), st.text(max_size=5)),
        (pa.binary(), st.binary(max_size=5)),
        (pa.large_binary(), st.binary(max_size=5)),
        (pa.binary(2), st.binary(min_size=2, max_size=2)),
        (
            pa.decimal128(12, 3),
            st.decimals(min_value=-(10**8), max_value=10**8, places=3, allow_nan=False),
        ),
        (pa.date32(), st.dates()),
        (pa.timestamp("us"), st.datetimes()),
        (pa.timestamp("ms", tz="UTC"), st.datetimes(timezones=st.just(utc))),
        (pa.time64("us"), st.times()),
        (pa.duration("us"), small_delta),
        (pa.dictionary(pa.int32(), pa.string()), st.text(max_size=3)),
    ]
    del decimal
    return st.sampled_from(leaves)


def _nested(
    children: st.SearchStrategy[tuple[Any, st.SearchStrategy[Any]]],
) -> st.SearchStrategy[tuple[Any, st.SearchStrategy[Any]]]:
    import pyarrow as pa

    def nullable(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.none() | values

    def as_list(child: tuple[Any, Any]) -> tuple[Any, Any]:
        t, v = child
        return pa.list_(t), st.lists(nullable(v), max_size=3)

    def as_large_list(child: tuple[Any, Any]) -> tuple[Any, Any]:
        t, v = child
        return pa.large_list(t), st.lists(nullable(v), max_size=3)

    def as_fixed_list(child: tuple[Any, Any]) -> tuple[Any, Any]:
        t, v = child
        return pa.list_(t, 2), st.lists(nullable(v), min_size=2, max_size=2)

    def as_map(child: tuple[Any, Any]) -> tuple[Any, Any]:
        t, v = child
        keys = st.lists(st.text(max_size=3), max_size=3, unique=True)
        return pa.map_(pa.string(), t), keys.flatmap(
            lambda ks: st.tuples(*[st.tuples(st.just(k), nullable(v)) for k in ks]).map(list)
        )

    def as_struct(fields: list[tuple[str, tuple[Any, Any]]]) -> tuple[Any, Any]:
        t = pa.struct([(name, ft) for name, (ft, _) in fields])
        # tuples, not dicts: a struct may name a field twice
        return t, st.tuples(*[nullable(fv) for _, (_, fv) in fields])

    names = st.sampled_from(["a", "b", "", "é", "a.b", "0"])
    fields = st.tuples(names, children)
    struct = st.lists(fields, min_size=1, max_size=3, unique_by=lambda f: f[0])
    # now and then a field name twice (pyarrow allows it; no JSON object holds it)
    struct_any = st.lists(fields, min_size=2, max_size=3)
    return (
        children.map(as_list)
        | children.map(as_large_list)
        | children.map(as_fixed_list)
        | children.map(as_map)
        | struct.map(as_struct)
        | struct.map(as_struct)
        | struct_any.map(as_struct)
    )


_ARROW_TYPES = st.deferred(lambda: st.recursive(_leaf_types(), _nested, max_leaves=4))


@st.composite
def _arrow_table(draw: st.DrawFn, max_rows: int = 8) -> Any:
    """A table of 1-4 columns of random (nested) types, nulls at every level; column
    names may repeat (a schema a JSON object cannot hold)."""
    import pyarrow as pa

    columns = draw(st.lists(_ARROW_TYPES, min_size=1, max_size=4))
    names = draw(
        st.lists(
            st.sampled_from(["a", "b", "", "é", "__index_level_0__", "x y"]) | st.text(max_size=4),
            min_size=len(columns),
            max_size=len(columns),
        )
    )
    n = draw(st.integers(0, max_rows))
    arrays = []
    for t, values in columns:
        data = draw(st.lists(st.none() | values, min_size=n, max_size=n))
        arrays.append(pa.array(data, type=t))
    return pa.Table.from_arrays(arrays, names=names)


def _expected_rows(table: Any) -> list[dict[str, Any]]:
    """What a reader must give for ``table``: one plain JSON dict per row (to_json_value
    of pyarrow's own rows)."""
    from mmirage_beam.io import to_json_value

    return [to_json_value(r) for r in table.to_pylist(maps_as_pydicts="lossy")]


def _repeats_a_name(t: Any) -> bool:
    """Whether a schema (or type) holds a column or struct field name twice."""
    import pyarrow as pa
    import pyarrow.types as pat

    if isinstance(t, pa.Schema):
        fields = list(t)
    elif pat.is_struct(t):
        fields = [t.field(i) for i in range(t.num_fields)]
    elif pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t):
        return _repeats_a_name(t.value_type)
    elif pat.is_map(t):
        return _repeats_a_name(t.item_type)
    else:
        return False
    names = [f.name for f in fields]
    return len(set(names)) < len(names) or any(_repeats_a_name(f.type) for f in fields)


def _check_table_read(
    table: Any, rows: list[Any], errors: list[Any], unreadable: bool = False
) -> None:
    """``table``'s rows each once; all invalid (named) when a name repeats or pyarrow
    cannot decode the file, else equal to pyarrow's own rows as plain JSON."""
    n = table.num_rows
    _check_exactly_once(rows, errors, n)
    if unreadable:  # the row groups pyarrow cannot decode: their rows are invalid
        assert all("cannot be read" in e.reason for e in errors), errors[:1]
        return
    if n and _repeats_a_name(table.schema):
        assert not rows and len(errors) == n, (rows[:3], errors[:3])
        assert all("more than once" in e.reason for e in errors), errors[0]
        return
    assert not errors, errors[:3]
    expected = _expected_rows(table)
    for r in rows:
        assert list(r.row) == table.column_names
        assert r.row == expected[r.source_index], (r.row, expected[r.source_index])


@fuzz_settings(FUZZ_EXAMPLES["parquet"])
@given(
    table=_arrow_table(),
    row_group_size=st.integers(1, 4),
    num_shards=st.integers(1, 3),
    seed=st.integers(0, 3),
)
def test_fuzz_parquet_odd_schemas_and_nulls(table, row_group_size, num_shards, seed):
    """Parquet files of random nested schemas with nulls at every level, in row groups
    of 1-4 rows, read in 1-3 shards: every row once, as plain JSON with its columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mmirage_beam.config.loader import DatasetConfig

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "data.parquet"
        try:
            pq.write_table(table, path, row_group_size=row_group_size)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            assume(False)  # a type Parquet cannot store (not the reader's business)
        try:
            stored, unreadable = pq.read_table(path), False
        except pa.ArrowInvalid:  # pyarrow cannot read back what it wrote (e.g.
            stored, unreadable = table, True  # map<str, fixed_size_list<null>>)
        rows, errors = _read_in_process(
            [DatasetConfig(str(path), "parquet")], num_shards, 1 << 20, seed
        )
    _check_table_read(stored, rows, errors, unreadable)


def _save_to_disk(root: Path, tables: list[Any], file_format: bool, batch_rows: int) -> None:
    """An HF ``save_to_disk`` folder: Arrow IPC streams (or files) and state.json."""
    import pyarrow as pa

    root.mkdir(parents=True, exist_ok=True)
    names = []
    for i, table in enumerate(tables):
        name = f"data-{i:05d}-of-{len(tables):05d}.arrow"
        names.append({"filename": name})
        schema = table.schema.with_metadata({"huggingface": json.dumps({"info": {}})})
        new = pa.ipc.new_file if file_format else pa.ipc.new_stream
        with pa.OSFile(str(root / name), "wb") as sink, new(sink, schema) as writer:
            for batch in table.to_batches(max_chunksize=batch_rows):
                writer.write_batch(batch)
    state = {"_data_files": names, "_fingerprint": "fuzz", "_format_type": None}
    (root / "state.json").write_text(json.dumps(state), encoding="utf-8")
    (root / "dataset_info.json").write_text("{}", encoding="utf-8")


@fuzz_settings(FUZZ_EXAMPLES["hf"])
@given(
    table=_arrow_table(max_rows=9),
    cuts=st.lists(st.integers(0, 9), max_size=2),
    file_format=st.booleans(),
    batch_rows=st.integers(1, 4),
    num_shards=st.integers(1, 3),
    seed=st.integers(0, 3),
)
def test_fuzz_hf_save_to_disk_nested_nulls(table, cuts, file_format, batch_rows, num_shards, seed):
    """HF ``save_to_disk`` folders (1-3 Arrow files, some empty, record batches of 1-4
    rows, stream or file format) of random nested schemas with nulls: every row once, in
    state.json order, as plain JSON."""
    from mmirage_beam.config.loader import DatasetConfig

    bounds = sorted({0, table.num_rows, *[min(c, table.num_rows) for c in cuts]})
    parts = [table.slice(a, b - a) for a, b in zip(bounds, bounds[1:])] or [table]
    with tempfile.TemporaryDirectory() as d:
        _save_to_disk(Path(d) / "ds", parts, file_format, batch_rows)
        rows, errors = _read_in_process(
            [DatasetConfig(str(Path(d) / "ds"), "loadable")], num_shards, 1 << 20, seed
        )
    _check_table_read(table, rows, errors)


# -- shrunk reader failures, as regression tests ------------------------------------------


def _dup_columns_table() -> Any:
    import pyarrow as pa

    return pa.Table.from_arrays([pa.array([1, 2]), pa.array(["x", "y"])], names=["a", "a"])


def _dup_fields_table() -> Any:
    import pyarrow as pa

    t = pa.list_(pa.struct([("a", pa.null()), ("a", pa.null())]))
    return pa.table({"a": pa.array([None]), "b": pa.array([[None]], type=t)})


def test_regression_jsonl_integer_too_long_is_an_invalid_row():
    """A 5,000-digit integer made json.loads raise ValueError (not JSONDecodeError),
    which ended the whole read; now the line is an invalid row naming its index."""
    _check_jsonl([b'{"a": 1}\n{"n": ' + b"7" * 5000 + b'}\n{"a": 2}\n'], False, 1 << 20, 1, 0)


@pytest.mark.parametrize("kind", ["parquet", "loadable"])
@pytest.mark.parametrize("table", [_dup_columns_table, _dup_fields_table])
def test_regression_repeated_column_names_make_invalid_rows(tmp_path, kind, table):
    """A column named twice lost one column's values silently (to_pylist keeps the last);
    a struct field named twice raised ValueError in to_pylist. Every row is now an
    invalid row naming its source_index and the repeated name."""
    import pyarrow.parquet as pq

    from mmirage_beam.config.loader import DatasetConfig

    t = table()
    if kind == "parquet":
        path = tmp_path / "dup.parquet"
        pq.write_table(t, path)
    else:
        path = tmp_path / "ds"
        _save_to_disk(path, [t], False, 1)
    rows, errors = _read_in_process([DatasetConfig(str(path), kind)], 1, 1 << 20, 0)
    assert rows == [] and sorted(e.source_index for e in errors) == list(range(t.num_rows))
    assert all("appears more than once in the schema" in e.reason for e in errors), errors


def test_regression_reader_failures_in_a_real_pipeline(tmp_path):
    """The shrunk reader failures through ReadDatasets on the DirectRunner, one dataset
    after another: source_index runs on across datasets, valid rows are read, and each
    bad row is an invalid row naming its index."""
    import apache_beam as beam
    import pyarrow.parquet as pq
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    from mmirage_beam.config.loader import DatasetConfig
    from mmirage_beam.io import ReadDatasets
    from mmirage_beam.records import SourceRow

    jsonl = tmp_path / "long.jsonl"
    jsonl.write_bytes(b'{"a": 1}\n{"n": ' + b"7" * 5000 + b'}\n{"a": 2}\n')
    pq.write_table(_dup_columns_table(), tmp_path / "dup.parquet")
    _save_to_disk(tmp_path / "ds", [_dup_fields_table()], False, 1)
    datasets = [
        DatasetConfig(str(jsonl), "JSONL"),
        DatasetConfig(str(tmp_path / "dup.parquet"), "parquet"),
        DatasetConfig(str(tmp_path / "ds"), "loadable"),
    ]
    with TestPipeline() as p:
        result = p | ReadDatasets(datasets)
        assert_that(result.rows, equal_to([SourceRow(0, 0, {"a": 1}), SourceRow(2, 0, {"a": 2})]))
        assert_that(
            result.errors | "Where" >> beam.Map(lambda e: (e.source_index, e.location)),
            equal_to([(1, "line 2"), (3, "row group 0"), (4, "row group 0"), (5, "Arrow data")]),
            label="Errors",
        )


# ======================================================================================
# 3. The result parsers
# ======================================================================================

_CIDS = st.sampled_from(["answer-text-0", "a-multimodal-17", "x"]) | st.from_regex(
    r"\A[A-Za-z0-9_-]{1,20}\Z"
)
_TEXT = st.none() | st.text(max_size=8) | st.sampled_from(["", " ", "42", '{"a": 1}'])
_TOKENS = st.integers(0, 10**6) | _JSON


@st.composite
def _openai_chat_line(draw: st.DrawFn) -> dict[str, Any]:
    cid = draw(_CIDS)
    kind = draw(st.sampled_from(["ok", "http_error", "batch_error"]))
    if kind == "batch_error":
        error = {"code": draw(st.sampled_from(["batch_expired", "batch_cancelled", None])),
                 "message": draw(_TEXT)}  # fmt: skip
        return {"id": "batch_req_1", "custom_id": cid, "response": None, "error": error}
    if kind == "http_error":
        status = draw(st.sampled_from([400, 401, 429, 500, 503]))
        code = draw(st.sampled_from(["rate_limit_exceeded", None, "x"]))
        body = {"error": {"message": draw(_TEXT), "type": draw(_TEXT), "param": None,
                          "code": code}}  # fmt: skip
        return {"id": "batch_req_1", "custom_id": cid,
                "response": {"status_code": status, "request_id": "req_1", "body": body},
                "error": None}  # fmt: skip
    message = {"role": "assistant", "content": draw(_TEXT), "refusal": draw(st.none() | _TEXT)}
    finish = draw(st.sampled_from(["stop", "length", "content_filter", "tool_calls", None]))
    body = {"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4.1-mini",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": draw(_TOKENS), "completion_tokens": draw(_TOKENS),
                      "total_tokens": 3}}  # fmt: skip
    return {"id": "batch_req_1", "custom_id": cid,
            "response": {"status_code": 200, "request_id": "req_1", "body": body},
            "error": None}  # fmt: skip


@st.composite
def _openai_responses_line(draw: st.DrawFn) -> dict[str, Any]:
    parts = draw(
        st.lists(
            st.fixed_dictionaries({"type": st.just("output_text"), "text": _TEXT})
            | st.fixed_dictionaries({"type": st.just("refusal"), "refusal": _TEXT}),
            max_size=2,
        )
    )
    output = [{"type": "reasoning", "id": "rs_1", "summary": []}] if draw(st.booleans()) else []
    output.append({"type": "message", "role": "assistant", "content": parts})
    status = draw(st.sampled_from(["completed", "incomplete", "failed", "in_progress"]))
    body = {"id": "resp_1", "object": "response", "status": status, "output": output,
            "usage": {"input_tokens": draw(_TOKENS), "output_tokens": draw(_TOKENS)},
            "incomplete_details": draw(st.none() | st.fixed_dictionaries(
                {"reason": st.sampled_from(["max_output_tokens", "content_filter", None])})),
            "error": draw(st.none() | st.fixed_dictionaries(
                {"code": st.sampled_from(["server_error", None]), "message": _TEXT}))}  # fmt: skip
    return {"id": "batch_req_1", "custom_id": draw(_CIDS),
            "response": {"status_code": 200, "request_id": "req_1", "body": body},
            "error": None}  # fmt: skip


@st.composite
def _anthropic_line(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["succeeded", "errored", "canceled", "expired"]))
    if kind == "succeeded":
        blocks = draw(
            st.lists(
                st.fixed_dictionaries({"type": st.just("text"), "text": _TEXT})
                | st.fixed_dictionaries({"type": st.just("thinking"), "thinking": _TEXT}),
                max_size=2,
            )
        )
        stop = draw(st.sampled_from(["end_turn", "max_tokens", "refusal", "stop_sequence",
                                     "model_context_window_exceeded", None]))  # fmt: skip
        result = {"type": "succeeded", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
            "content": blocks, "stop_reason": stop,
            "usage": {"input_tokens": draw(_TOKENS), "output_tokens": draw(_TOKENS)}}}  # fmt: skip
    elif kind == "errored":
        inner = {"type": draw(st.sampled_from(["invalid_request_error", "api_error"]) | _TEXT),
                 "message": draw(_TEXT)}  # fmt: skip
        result = {"type": "errored", "error": {"type": "error", "error": inner}}
    else:
        result = {"type": kind}
    return {"custom_id": draw(_CIDS), "result": result}


def _node_paths(value: Any, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _node_paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _node_paths(v, (*path, i))
    return out


@st.composite
def _mutated(draw: st.DrawFn, lines: st.SearchStrategy[dict[str, Any]]) -> Any:
    """A provider line with 0-3 nodes replaced by random JSON or deleted."""
    line = draw(lines)
    for _ in range(draw(st.integers(0, 3))):
        paths = _node_paths(line)
        path = draw(st.sampled_from(paths))
        if not path:
            line = draw(_JSON)
            continue
        parent: Any = line
        for p in path[:-1]:
            parent = parent[p]
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(_JSON)
    return line


def _parsers() -> dict[str, Callable[[Any], Any]]:
    from mmirage_beam.providers.anthropic.adapter import normalise_result
    from mmirage_beam.providers.openai.adapter import normalise_result_line

    return {"openai": normalise_result_line, "anthropic": normalise_result}


_LINES = {
    "openai_chat": ("openai", _openai_chat_line()),
    "openai_responses": ("openai", _openai_responses_line()),
    "anthropic": ("anthropic", _anthropic_line()),
}


def _check_outcome(result: Any, line: Any) -> None:
    """A typed outcome: exactly one of a non-empty ``generated_text`` and an ``error``
    {type: non-empty str, message: str, status_code: int | None}, token counts ints >= 0,
    and the custom_id the line's own (or None)."""
    from mmirage_beam.records import ProviderResult
    from mmirage_beam.results import MALFORMED_RESPONSE, is_retryable

    assert isinstance(result, ProviderResult), result
    assert ProviderResult.from_json(result.to_json()) == result, result
    result = result.to_json()
    cid = result.get("custom_id")
    assert cid is None or (isinstance(cid, str) and cid), result
    if isinstance(line, dict) and isinstance(line.get("custom_id"), str) and cid is not None:
        assert cid == line["custom_id"], (cid, line)
    assert ("generated_text" in result) != ("error" in result), result
    if "generated_text" in result:
        assert isinstance(result["generated_text"], str) and result["generated_text"], result
    else:
        err = result["error"]
        assert isinstance(err, dict), result
        assert isinstance(err.get("type"), str) and err["type"], result
        assert isinstance(err.get("message"), str), result
        status = err.get("status_code")
        assert status is None or (isinstance(status, int) and not isinstance(status, bool)), err
        assert "raw_text" not in err or isinstance(err["raw_text"], str), err
        assert isinstance(is_retryable(err), bool)
        if err["type"] == MALFORMED_RESPONSE and "line" in result:
            assert isinstance(result["line"], int) and isinstance(result["offset"], int)
    for k in ("input_tokens", "output_tokens"):
        if k in result:
            v = result[k]
            assert isinstance(v, int) and not isinstance(v, bool) and v >= 0, result


def _raw(data: bytes, number: int = 3, offset: int = 100) -> Any:
    from mmirage_beam.jsonl import RawLine

    return RawLine(number, offset, data, len(data) + 1)


@fuzz_settings(FUZZ_EXAMPLES["result_lines"])
@given(
    which=st.sampled_from(sorted(_LINES)),
    data=st.data(),
    ensure_ascii=st.booleans(),
    damage=st.sampled_from(["none", "none", "cut", "splice", "bytes"]),
)
def test_fuzz_result_lines_always_a_typed_outcome(which, data, ensure_ascii, damage):
    """A provider result line (OpenAI chat completions, OpenAI Responses, Anthropic) with
    random nodes retyped or deleted, then maybe cut short, spliced with random bytes or
    replaced by them: the adapter's normaliser raises nothing but MalformedResult, and
    the line always becomes one typed outcome, attributed to its own custom_id."""
    from mmirage_beam.results import MalformedResult, result_from_line

    provider, lines = _LINES[which]
    normalise = _parsers()[provider]
    line = data.draw(_mutated(lines), label="line")
    encoded = json.dumps(line, ensure_ascii=ensure_ascii).encode("utf-8")
    if damage == "cut":
        encoded = encoded[: data.draw(st.integers(0, len(encoded)), label="cut")]
    elif damage == "splice":
        i = data.draw(st.integers(0, len(encoded)), label="at")
        encoded = encoded[:i] + data.draw(st.binary(min_size=1, max_size=4)) + encoded[i:]
    elif damage == "bytes":
        encoded = data.draw(st.binary(max_size=40), label="bytes")
    if damage == "none":
        try:
            _check_outcome(normalise(copy.deepcopy(line)), line)
        except MalformedResult as exc:
            assert exc.custom_id is None or exc.custom_id == line.get("custom_id")
    assume(encoded.strip())
    result = result_from_line(_raw(encoded), normalise, "output file f of batch b")
    _check_outcome(result, line if damage == "none" else None)
    try:  # a splice can leave valid JSON with another custom_id: then that one is right
        parsed = json.loads(encoded)
    except (ValueError, RecursionError):
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("custom_id"), str):
        owner = parsed["custom_id"] or None
    elif damage in ("none", "cut"):  # a cut line's id is recovered whole or not at all
        owner = line.get("custom_id") if isinstance(line, dict) else None
    else:
        return  # random bytes, or bytes spliced anywhere (into the id, too)
    if result.custom_id is not None:
        assert result.custom_id == owner, (result, line)


@fuzz_settings(FUZZ_EXAMPLES["result_files"])
@given(
    which=st.sampled_from(sorted(_LINES)),
    data=st.data(),
    sep=st.sampled_from([b"\n", b"\r\n"]),
    block=st.integers(1, 64),
)
def test_fuzz_result_files_one_outcome_per_line(which, data, sep, block):
    """A whole result file of damaged and good lines, streamed in blocks of 1-64 bytes:
    one typed outcome per non-blank line, in file order, none skipped."""
    from mmirage_beam.jsonl import iter_raw_lines
    from mmirage_beam.results import results_from_lines

    provider, lines = _LINES[which]
    raw_lines = data.draw(
        st.lists(
            _mutated(lines).map(lambda v: json.dumps(v).encode("utf-8"))
            | st.binary(max_size=30)
            | st.sampled_from([b"", b"  ", b"{", b'{"custom_id": "c', b"[" * 2000]),
            max_size=8,
        ),
        label="lines",
    )
    content = b"".join(line.replace(b"\n", b" ") + sep for line in raw_lines)
    blocks = [content[i : i + block] for i in range(0, len(content), block)]
    results = list(results_from_lines(iter_raw_lines(blocks), _parsers()[provider], "results file"))
    expected = [i + 1 for i, line in enumerate(raw_lines) if line.replace(b"\n", b" ").strip()]
    assert len(results) == len(expected), (len(results), expected)
    for r in results:
        _check_outcome(r, None)


# -- shrunk parser failures, as regression tests -------------------------------------------


def _chat_line(body: Any = None, **response: Any) -> dict[str, Any]:
    body = {"choices": [{"message": {"content": "42"}, "finish_reason": "stop"}]} | (body or {})
    return {"custom_id": "c1", "response": {"status_code": 200, "body": body} | response}


def _claude_line(message: Any = None, **result: Any) -> dict[str, Any]:
    msg = {"content": [{"type": "text", "text": "42"}], "stop_reason": "end_turn"}
    return {"custom_id": "c1", "result": {"type": "succeeded", "message": msg | (message or {})}}


#: Shrunk failures of the parser fuzzers: (provider, line). Before the fixes each raised
#: (TypeError, ValueError, AttributeError, OverflowError) or gave an untyped outcome.
PARSER_REGRESSIONS = {
    "openai_status_code_list": ("openai", _chat_line(status_code=[])),
    "openai_status_code_infinity": (
        "openai",
        '{"custom_id": "c1", "response": {"status_code": Infinity, "body": {}}}',
    ),
    "openai_error_type_int": (
        "openai",
        _chat_line(status_code=400, body={"error": {"type": 5, "message": ["m"]}}),
    ),
    "openai_usage_list": ("openai", _chat_line({"usage": {"prompt_tokens": [1]}})),
    "openai_usage_text": ("openai", _chat_line({"usage": {"prompt_tokens": ":"}})),
    "openai_batch_error_code_dict": ("openai", {"custom_id": "c1", "error": {"code": {"a": 1}}}),
    "openai_batch_error_code_null": (
        "openai",
        {"custom_id": "c1", "response": None, "error": {"code": None, "message": None}},
    ),
    "responses_usage_text": (
        "openai",
        _chat_line(
            {
                "object": "response",
                "status": "completed",
                "output": [{"type": "message", "content": [{"type": "output_text", "text": "4"}]}],
                "usage": {"input_tokens": 1, "output_tokens": ":"},
            }
        ),
    ),
    "responses_incomplete_details_text": (
        "openai",
        _chat_line(
            {
                "object": "response",
                "status": "incomplete",
                "output": [],
                "incomplete_details": "max_output_tokens",
            }
        ),
    ),
    "responses_error_code_list": (
        "openai",
        _chat_line(
            {
                "object": "response",
                "status": "failed",
                "output": [],
                "error": {"code": [1], "message": "x"},
            }
        ),
    ),
    "anthropic_usage_list": ("anthropic", _claude_line({"usage": {"input_tokens": [1]}})),
    "anthropic_usage_text": ("anthropic", _claude_line({"usage": {"input_tokens": ":"}})),
    "anthropic_usage_negative": (
        "anthropic",
        _claude_line({"usage": {"input_tokens": 0, "output_tokens": -1}}),
    ),
    "anthropic_text_not_a_string": (
        "anthropic",
        _claude_line({"content": [{"type": "text", "text": 5}]}),
    ),
    "anthropic_error_type_list": (
        "anthropic",
        {
            "custom_id": "c1",
            "result": {"type": "errored", "error": {"type": "error", "error": {"type": [1]}}},
        },
    ),
    "integer_too_long": ("openai", '{"custom_id": "c1", "n": ' + "7" * 5000 + "}"),
    "nested_too_deeply": ("anthropic", '{"custom_id": "c1", "x": ' + "[" * 5000 + "]" * 5000 + "}"),
}


@pytest.mark.parametrize("name", sorted(PARSER_REGRESSIONS))
def test_regression_result_lines_are_typed_outcomes(name):
    from mmirage_beam.results import MalformedResult, result_from_line

    provider, line = PARSER_REGRESSIONS[name]
    normalise = _parsers()[provider]
    if not isinstance(line, str):
        try:
            _check_outcome(normalise(copy.deepcopy(line)), line)
        except MalformedResult:
            pass
    data = (line if isinstance(line, str) else json.dumps(line)).encode("utf-8")
    result = result_from_line(_raw(data), normalise, "results file")
    _check_outcome(result, None)
    assert result.custom_id == "c1", result


def test_regression_a_normaliser_that_raises_is_one_malformed_outcome():
    """A (plugin) normaliser that trips on a shape raises TypeError & co.: the line is
    a malformed_response for its custom_id, never the end of the merge."""
    from mmirage_beam.results import MALFORMED_RESPONSE, result_from_line

    def normalise(value: Any) -> dict[str, Any]:
        return {"custom_id": value["custom_id"], "generated_text": value["text"].upper()}

    result = result_from_line(_raw(b'{"custom_id": "c1", "text": 5}'), normalise, "file f")
    _check_outcome(result, None)
    assert result.custom_id == "c1" and result.error.type == MALFORMED_RESPONSE
    assert "AttributeError" in result.error.message and result.line == 3
