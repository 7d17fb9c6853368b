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
for a deeper run by hand (``MMIRAGE_FUZZ_SCALE=20 python -m pytest tests/test_fuzz.py``).
The readers are driven through their DoFns in-process (the counting pass, the offsets,
the reading pass, splits in shuffled order), which is what makes hundreds of examples
affordable; ``test_readers.py`` covers the same DoFns wired in a real pipeline.
"""

from __future__ import annotations

import os
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
    "execution_params.retry": _is_bool,
    "execution_params.merge": _is_bool,
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
        cmd = [sys.executable, "-m", "mmirage_beam.cli", "run", "--config", str(path)]
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
