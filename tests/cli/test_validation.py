"""Validation before anything is spent: whole `mmirage run`s on small bad inputs.

Every case is a real run of ``pipelines.submit.main``: dry runs (``--export-prompts``)
where a key is not the point, and submissions to the embedded fake provider where
"nothing was submitted" must be proven (``fake.submitted_requests() == []``). The
reader-level cases (BOM, CRLF, blank lines, split boundaries) are in test_readers.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mmirage_beam.providers.base import BatchAdapterRegistry
from mmirage_beam.providers.config import BatchProviderConfigRegistry
from mmirage_beam.providers.openai import OpenAIBatchConfig
from mmirage_beam.providers.openai.adapter import OpenAIBatchAdapter
from pipelines.submit import main as run_main
from tests.conftest import IMAGES, base_config, write_config

GOOD = [
    {"question": "How many legs does a spider have?"},
    {"question": "What is 7 times 6?"},
    {"question": "Name a prime number above 10."},
]


def _write_lines(tmp_path: Path, lines: list[Any], name: str = "data.jsonl") -> Path:
    """Each item a dict (dumped as JSON), a str (written as is) or raw bytes."""
    raw = b""
    for item in lines:
        if isinstance(item, dict):
            item = json.dumps(item)
        raw += (item if isinstance(item, bytes) else item.encode("utf-8")) + b"\n"
    path = tmp_path / name
    path.write_bytes(raw)
    return path


def _config(tmp_path: Path, data: Path, provider: str = "openai", **proc: Any) -> dict[str, Any]:
    cfg = base_config(tmp_path, provider, **proc)
    kind = "parquet" if data.suffix == ".parquet" else "JSONL"
    cfg["loading_params"]["datasets"] = [
        {"path": str(data), "type": kind, "output_dir": str(tmp_path / "shards")}
    ]
    cfg["processing_params"]["outputs"][0]["prompt"] = "{{ question }}"
    return cfg


def _run(tmp_path: Path, cfg: dict[str, Any], run_id: str, *flags: str, dry: bool = True):
    argv = ["--config", write_config(tmp_path, cfg), "--run-id", run_id, *flags]
    if dry:
        argv += ["--export-prompts", str(tmp_path / "export.jsonl")]
    return run_main(argv)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x]


def _invalid(tmp_path: Path, run_id: str) -> list[dict[str, Any]]:
    path = tmp_path / "meta" / f"batch_metadata.invalid_rows.{run_id}.jsonl"
    if not path.exists():
        return []
    return sorted(_read_jsonl(path), key=lambda e: e["source_index"])


def _export(tmp_path: Path, run_id: str) -> dict[str, dict[str, Any]]:
    lines = _read_jsonl(tmp_path / f"export.{run_id}.jsonl")
    return {ln["request"]["custom_id"]: ln["request"] for ln in lines}


def _content(request: dict[str, Any]) -> Any:
    body = request.get("body") or request.get("params")
    return body["messages"][0]["content"]


def _placeholders(tmp_path: Path, run_id: str = "*") -> list[dict[str, Any]]:
    files = sorted((tmp_path / "shards" / "shard_0").glob(f"placeholders.{run_id}-*.jsonl"))
    return sorted((r for f in files for r in _read_jsonl(f)), key=lambda r: r["source_index"])


# Lines 1-8 of a file where five rows are bad in five different ways.
MIXED = [
    GOOD[0],
    '{"question": "unterminated"',  # not JSON
    GOOD[1],
    {"other": "no question here"},  # key missing
    {"question": None},  # null
    GOOD[2],
    "[1, 2, 3]",  # JSON, not an object
    {"question": " \n\t "},  # prompt renders to whitespace only
]
MIXED_VALID = (0, 2, 5)


def test_every_invalid_row_is_listed_and_nothing_is_submitted(tmp_path, capsys, provider_env):
    fake = provider_env
    data = _write_lines(tmp_path, MIXED)
    cfg = _config(tmp_path, data, base_url=fake.openai_base_url)
    code = _run(tmp_path, cfg, "bad", dry=False)
    out = capsys.readouterr().out
    assert code == 1, out
    invalid = _invalid(tmp_path, "bad")
    assert [e["source_index"] for e in invalid] == [1, 3, 4, 6, 7]
    assert all(e["dataset_path"] == str(data) for e in invalid)
    by_index = {e["source_index"]: e for e in invalid}
    assert by_index[1]["location"] == "line 2" and "not valid JSON" in by_index[1]["reason"]
    assert by_index[3]["input_name"] == "question" and "is missing" in by_index[3]["reason"]
    assert by_index[4]["input_name"] == "question" and "missing or null" in by_index[4]["reason"]
    assert by_index[6]["location"] == "line 7" and "JSON array" in by_index[6]["reason"]
    assert by_index[7]["input_name"] == "answer" and "whitespace only" in by_index[7]["reason"]
    # Nothing reached the provider; no receipt, no placeholder pointing nowhere.
    assert fake.submitted_requests() == [] and fake.batches() == []
    assert fake.call_counts().get("files_create", 0) == 0
    assert not list((tmp_path / "meta").glob("batch_metadata.text.*"))
    assert _placeholders(tmp_path) == []
    path = tmp_path / "meta" / "batch_metadata.invalid_rows.bad.jsonl"
    assert "invalid rows:        5" in out
    assert f"5 invalid row(s), all listed in {path}" in out
    for i in (1, 3, 4, 6, 7):
        assert f"source_index {i}" in out
    assert "Nothing was submitted" in out


@pytest.mark.parametrize("how", ["flag", "config"])
def test_skip_invalid_rows_submits_the_rest(tmp_path, capsys, provider_env, how):
    fake = provider_env
    data = _write_lines(tmp_path, MIXED)
    cfg = _config(tmp_path, data, base_url=fake.openai_base_url)
    flags = []
    if how == "flag":
        flags = ["--skip-invalid-rows"]
    else:
        cfg["execution_params"]["skip_invalid_rows"] = True
    code = _run(tmp_path, cfg, "skip", *flags, dry=False)
    out = capsys.readouterr().out
    assert code == 0, out
    held = fake.submitted_requests("openai")
    assert sorted(h["custom_id"] for h in held) == [f"answer-text-{i}" for i in MIXED_VALID]
    assert {h["custom_id"]: _content(h["request"]) for h in held} == {
        f"answer-text-{i}": MIXED[i]["question"] for i in MIXED_VALID
    }
    assert [e["source_index"] for e in _invalid(tmp_path, "skip")] == [1, 3, 4, 6, 7]
    receipts = _read_jsonl(tmp_path / "meta" / "batch_metadata.text.skip.jsonl")
    assert sum(r["submitted_request_count"] for r in receipts) == 3
    assert "invalid rows:        5" in out and "requests:            3" in out
    assert "5 invalid row(s), all listed in" in out and "These rows were skipped" in out
    assert "Nothing was submitted" not in out


def test_skipped_rows_get_no_placeholder(tmp_path, capsys):
    data = _write_lines(tmp_path, MIXED)
    assert _run(tmp_path, _config(tmp_path, data), "ph", "--skip-invalid-rows") == 0
    # Row 7 (whitespace-only prompt) has no request: no placeholder may point to it.
    assert [r["source_index"] for r in _placeholders(tmp_path)] == list(MIXED_VALID)


#: One bad line of each kind: (test id, the line, its location, the input named, reason).
BAD_LINES = [
    ("truncated", '{"question": "no closing brace"', True, None, "line is not valid JSON"),
    ("bad-value", '{"question": }', True, None, "line is not valid JSON: Expecting value"),
    ("string", '"just a string"', True, None, "line is a JSON string, not a JSON object"),
    ("number", "42", True, None, "line is a JSON number, not a JSON object"),
    ("null-line", "null", True, None, "line is a JSON null, not a JSON object"),
    ("latin1", b'{"question": "caf\xe9"}', True, None, "line is not valid UTF-8: byte 0xe9"),
    ("missing", {"other": 1}, False, "question",
     "input 'question' (key 'question') is missing: the row has no key 'question' "
     "(its keys: 'other')"),
    ("null-value", {"question": None}, False, "question", "is missing or null"),
    ("whitespace", {"question": "  \t\n "}, False, "answer",
     "output 'answer' renders to whitespace only"),
]  # fmt: skip


@pytest.fixture(scope="module")
def bad_lines_run(tmp_path_factory):
    """One dry run over a good row, every line of BAD_LINES (source_index 1..9, file
    lines 2..10) and a good row: (folder, data file, exit code, stdout, invalid rows by
    source_index). One run instead of one per kind of bad line (each a whole pipeline);
    every bad line is still read, validated and named on its own."""
    import contextlib
    import io
    import os

    tmp = tmp_path_factory.mktemp("bad_lines")
    data = _write_lines(tmp, [GOOD[0], *(b[1] for b in BAD_LINES), GOOD[1]])
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        for var in list(os.environ):  # as tests/conftest.py's _no_real_keys does
            if var.endswith(("_API_KEY", "_API_KEY_FILE", "_BASE_URL")):
                mp.delenv(var)
        code = _run(tmp, _config(tmp, data), "r1")
    invalid = _invalid(tmp, "r1")
    return tmp, data, code, out.getvalue(), {e["source_index"]: e for e in invalid}, invalid


def test_bad_lines_stop_the_run_each_named_once(bad_lines_run):
    tmp, _data, code, _out, _by_index, invalid = bad_lines_run
    assert code == 1
    # exactly one entry per bad line, none for the good rows around them
    assert [e["source_index"] for e in invalid] == list(range(1, len(BAD_LINES) + 1))
    assert not (tmp / "export.r1.jsonl").exists()


@pytest.mark.parametrize(
    "n, location, input_name, reason",
    [(n, loc, name, reason) for n, (_id, _line, loc, name, reason) in enumerate(BAD_LINES, 1)],
    ids=[b[0] for b in BAD_LINES],
)
def test_bad_row_is_named(bad_lines_run, n, location, input_name, reason):
    _tmp, data, _code, out, by_index, _invalid_rows = bad_lines_run
    location = f"line {n + 1}" if location else None  # source_index n is line n + 1
    err = by_index[n]
    assert err["source_index"] == n and err["dataset_path"] == str(data)
    assert err["input_name"] == input_name and err["location"] == location
    assert reason in err["reason"]
    # The summary names the row, the file and (for a line that cannot be read) the line.
    (line,) = [ln for ln in out.splitlines() if ln.lstrip().startswith(f"source_index {n} ")]
    assert str(data) in line
    if location:
        assert f"({location})" in line


def test_bad_line_in_a_directory_names_the_file(tmp_path, capsys):
    folder = tmp_path / "parts"
    folder.mkdir()
    _write_lines(folder, [GOOD[0], GOOD[1]], "a.jsonl")
    bad = _write_lines(folder, [GOOD[2], b'{"question": "\xff\xfe"}'], "b.jsonl")
    cfg = _config(tmp_path, tmp_path / "x.jsonl")
    cfg["loading_params"]["datasets"][0]["path"] = str(folder)
    assert _run(tmp_path, cfg, "dir") == 1
    (err,) = _invalid(tmp_path, "dir")
    assert err["source_index"] == 3 and err["location"] == f"line 2 of {bad}"
    assert "not valid UTF-8: byte 0xff at byte offset 14" in err["reason"]
    assert f"line 2 of {bad}" in capsys.readouterr().out


def test_default_supplies_missing_and_null_inputs(tmp_path, capsys):
    data = _write_lines(
        tmp_path,
        [{"question": "q0", "hint": "h0"}, {"question": "q1"}, {"question": "q2", "hint": None}],
    )
    cfg = _config(tmp_path, data)
    cfg["processing_params"]["inputs"].append(
        {"name": "hint", "key": "hint", "default": "no hint given"}
    )
    cfg["processing_params"]["outputs"][0]["prompt"] = "{{ question }} / {{ hint }}"
    assert _run(tmp_path, cfg, "dft") == 0, capsys.readouterr()
    requests = _export(tmp_path, "dft")
    assert {cid: _content(r) for cid, r in requests.items()} == {
        "answer-text-0": "q0 / h0",
        "answer-text-1": "q1 / no hint given",
        "answer-text-2": "q2 / no hint given",
    }
    assert _invalid(tmp_path, "dft") == []


def _assert_every_json_file_is_clean(root: Path) -> int:
    """Every .jsonl/.json file under root is UTF-8 whose lines parse; returns the count."""
    count = 0
    for path in root.rglob("*"):
        if path.suffix not in (".jsonl", ".json") or not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8")  # raises on invalid UTF-8
        for line in text.splitlines():
            if line.strip():
                json.loads(line)
        count += 1
    return count


def test_lone_surrogates_make_the_row_invalid_and_are_written_back_as_read(
    tmp_path, capsys, provider_env
):
    """A lone surrogate (JSON "\\ud800") in an input is an invalid row naming the row and
    the input, never U+FFFD sent silently; skipped, the user is told; a source column
    holding one keeps it, in the placeholder rows and in the merged row."""
    from pipelines.merge import main as merge_main

    fake = provider_env
    # JSON escapes of lone surrogates: valid JSON, but not encodable as UTF-8.
    data = _write_lines(
        tmp_path,
        [
            GOOD[0],
            r'{"question": "bad \ud800 here", "notes": ["x"]}',
            r'{"question": "paired \ud83d\ude00 is fine", "notes": ["x\udfff"]}',
            r'{"question": "fine too", "\udc00key": "kept \udbff"}',
        ],
    )
    cfg = _config(tmp_path, data, base_url=fake.openai_base_url)
    cfg["processing_params"]["remove_columns"] = False  # source columns reach the output
    cfg["processing_params"]["inputs"].append({"name": "notes", "key": "notes", "default": []})
    cfg["processing_params"]["outputs"][0]["prompt"] = "{{ question }} {{ notes | join(',') }}"
    # Strict (the default): exit 1, nothing exported or submitted, the rows named.
    assert _run(tmp_path, cfg, "sur") == 1
    out = capsys.readouterr().out
    assert [(e["source_index"], e["input_name"]) for e in _invalid(tmp_path, "sur")] == [
        (1, "question"),
        (2, "notes"),
    ]
    bad = _invalid(tmp_path, "sur")
    assert "input 'question' (key 'question') holds a lone UTF-16 surrogate" in bad[0]["reason"]
    assert "'\\ud800' at character 4" in bad[0]["reason"] and "U+FFFD" in bad[0]["reason"]
    assert "[0]: '\\udfff' at character 1" in bad[1]["reason"]
    assert "source_index 1" in out and "Nothing was submitted" in out
    # skip_invalid_rows: the others are submitted, the skipped rows listed with the input.
    code = run_main(
        ["--config", write_config(tmp_path, cfg), "--run-id", "sur2", "--skip-invalid-rows"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "2 invalid row(s)" in out and "skipped (skip_invalid_rows)" in out
    assert "lone UTF-16 surrogate" in out
    assert _assert_every_json_file_is_clean(tmp_path) >= 4  # UTF-8 JSON everywhere
    held = {h["custom_id"]: _content(h["request"]) for h in fake.submitted_requests()}
    assert held == {"answer-text-0": GOOD[0]["question"] + " ", "answer-text-3": "fine too "}
    placeholders = (tmp_path / "shards" / "shard_0").glob("placeholders.sur2-*.jsonl")
    raw = b"".join(f.read_bytes() for f in placeholders)
    assert b'"\\udc00key": "kept \\udbff"' in raw  # a non-input column, as the source held it
    # The merged rows: the skipped ones marked, every source column as it was read.
    merged = tmp_path / "merged.jsonl"
    code = merge_main(["--config", write_config(tmp_path, cfg), "--output-path", str(merged)])
    assert code == 0, capsys.readouterr()
    lines = merged.read_bytes().splitlines()
    assert len(lines) == 4
    assert b'"question": "bad \\ud800 here"' in lines[1] and b"mmirage_skipped" in lines[1]
    assert b'"notes": ["x\\udfff"]' in lines[2] and b"mmirage_skipped" in lines[2]
    assert b'"\\udc00key": "kept \\udbff"' in lines[3] and b"mmirage_skipped" not in lines[3]
    assert json.loads(lines[1])["question"] == "bad \ud800 here"  # decodes to what was read


def _write_numpy_parquet(path: Path) -> None:
    table = pa.table(
        {
            "question": ["first", "second", "third"],
            "n": np.array([3, -7, 2**40], dtype=np.int64),
            "small": np.array([1, 2, 255], dtype=np.uint8),
            "f32": np.array([0.5, 1.25, -2.0], dtype=np.float32),
            "x": np.array([1.5, np.nan, 2.5]),  # NaN stored as a float, not a null
            "vec": pa.array(
                [np.array([1.5, np.nan]), np.array([], dtype=np.float64), np.array([2.0, 3.0])]
            ),
            "ok": np.array([True, False, True]),
        }
    )
    assert table.column("x").null_count == 0  # a real NaN, not a null
    pq.write_table(table, path)


def test_parquet_numpy_values_and_nan_become_plain_json(tmp_path, capsys):
    """Decision: NaN (and infinities) become JSON null. A NaN *input* is therefore a null
    input: its ``default`` applies, or the row is invalid; nested NaN renders as ``null``
    through ``tojson`` and is ``null`` in the written rows."""
    data = tmp_path / "numbers.parquet"
    _write_numpy_parquet(data)
    cfg = _config(tmp_path, data)
    cfg["processing_params"]["remove_columns"] = False
    cfg["processing_params"]["inputs"] += [
        {"name": "n", "key": "n"},
        {"name": "small", "key": "small"},
        {"name": "f32", "key": "f32"},
        {"name": "x", "key": "x", "default": "unknown"},
        {"name": "vec", "key": "vec"},
        {"name": "ok", "key": "ok"},
    ]
    cfg["processing_params"]["outputs"][0]["prompt"] = (
        "{{ question }} n={{ n }} small={{ small }} f32={{ f32 }} x={{ x }} "
        "vec={{ vec | tojson }} ok={{ ok }} all={{ [n, f32, vec, ok] | tojson }}"
    )
    assert _run(tmp_path, cfg, "pq") == 0, capsys.readouterr()
    requests = _export(tmp_path, "pq")
    assert {cid: _content(r) for cid, r in requests.items()} == {
        "answer-text-0": "first n=3 small=1 f32=0.5 x=1.5 vec=[1.5, null] ok=True "
        "all=[3, 0.5, [1.5, null], true]",
        "answer-text-1": "second n=-7 small=2 f32=1.25 x=unknown vec=[] ok=False "
        "all=[-7, 1.25, [], false]",
        "answer-text-2": f"third n={2**40} small=255 f32=-2.0 x=2.5 vec=[2.0, 3.0] ok=True "
        f"all=[{2**40}, -2.0, [2.0, 3.0], true]",
    }
    rows = _placeholders(tmp_path)
    assert [r["x"] for r in rows] == [1.5, None, 2.5]
    assert [r["vec"] for r in rows] == [[1.5, None], [], [2.0, 3.0]]
    assert rows[0]["n"] == 3 and rows[2]["small"] == 255 and rows[1]["ok"] is False
    for r in rows:  # plain JSON: no NaN literal anywhere
        assert "NaN" not in json.dumps(r, allow_nan=False)

    # Without a default, the NaN input is a null input: that row is invalid.
    del cfg["processing_params"]["inputs"][4]["default"]
    assert _run(tmp_path, cfg, "pq2") == 1
    (err,) = _invalid(tmp_path, "pq2")
    assert err["source_index"] == 1 and err["input_name"] == "x"
    assert "input 'x' (key 'x') is missing or null" in err["reason"]
    assert err["dataset_path"] == str(data)


def test_missing_image_is_refused_before_submission(tmp_path, capsys, provider_env):
    fake = provider_env
    data = _write_lines(
        tmp_path,
        [
            {"question": "What animal?", "image": "rocket.jpg"},
            {"question": "And here?", "image": "no_such_photo.png"},
            {"question": "And this one?", "image": ["rocket.jpg", "gone/missing.webp"]},
        ],
    )
    cfg = _config(tmp_path, data, "anthropic", base_url=fake.anthropic_base_url)
    cfg["loading_params"]["datasets"][0]["image_base_path"] = str(IMAGES)
    cfg["processing_params"]["inputs"].append({"name": "image", "key": "image", "type": "image"})
    assert (IMAGES / "rocket.jpg").is_file()
    assert _run(tmp_path, cfg, "img", dry=False) == 1
    invalid = _invalid(tmp_path, "img")
    assert [(e["source_index"], e["input_name"]) for e in invalid] == [(1, "image"), (2, "image")]
    assert f"{IMAGES}/no_such_photo.png" in invalid[0]["reason"]
    assert "cannot be read" in invalid[0]["reason"]
    assert f"{IMAGES}/gone/missing.webp" in invalid[1]["reason"]
    assert fake.submitted_requests() == [] and fake.batches() == []
    assert "Nothing was submitted" in capsys.readouterr().out


# -- a provider plugin with a tiny hard per-batch limit ------------------------------------


@dataclass
class TinyBatchConfig(OpenAIBatchConfig):
    """An OpenAI-compatible gateway whose batches hold at most 700 bytes."""

    PROVIDER_MAX_BATCH_BYTES: ClassVar[Optional[int]] = 700
    PROVIDER_LIMITS_SOURCE: ClassVar[str] = "test gateway: 700 bytes per batch"

    provider: str = "tinybatch"


@pytest.fixture
def tiny_provider(monkeypatch):
    monkeypatch.setitem(BatchProviderConfigRegistry._registry, "tinybatch", TinyBatchConfig)
    monkeypatch.setitem(BatchAdapterRegistry._registry, "tinybatch", OpenAIBatchAdapter)
    monkeypatch.setenv("TINYBATCH_API_KEY", "sk-test-tiny")


@pytest.mark.parametrize("policy", ["isolate", "reject"])
def test_request_above_the_hard_batch_limit_is_an_error_even_isolated(
    tmp_path, capsys, provider_env, tiny_provider, policy
):
    fake = provider_env
    # ~150-byte requests fit in 300-byte chunks; 450 bytes is isolated (under the hard
    # limit of 700); 2000 bytes can never be submitted.
    data = _write_lines(
        tmp_path,
        [GOOD[0], {"question": "m" * 300}, {"question": "L" * 2000}, GOOD[1]],
    )
    cfg = _config(
        tmp_path,
        data,
        "tinybatch",
        base_url=fake.openai_base_url,
        max_chunk_bytes=300,
        oversized_request_policy=policy,
    )
    assert _run(tmp_path, cfg, "big", dry=False) == 1
    invalid = _invalid(tmp_path, "big")
    hard = next(e for e in invalid if e["source_index"] == 2)
    assert hard["input_name"] == "answer"
    assert "above the provider's hard limit of 700 bytes per batch" in hard["reason"]
    assert "can never be submitted" in hard["reason"]
    assert [e["source_index"] for e in invalid] == ([2] if policy == "isolate" else [1, 2])
    assert fake.submitted_requests() == []
    capsys.readouterr()

    if policy == "isolate":
        # Skipping it, the rest goes through, the 450-byte request in a batch of its own.
        assert _run(tmp_path, cfg, "big2", "--skip-invalid-rows", dry=False) == 0
        held = fake.submitted_requests()
        assert sorted(h["custom_id"] for h in held) == [f"answer-text-{i}" for i in (0, 1, 3)]
        receipts = _read_jsonl(tmp_path / "meta" / "batch_metadata.text.big2.jsonl")
        isolated = [r for r in receipts if r["has_oversized_request"]]
        assert [list(r["custom_id_to_source_index"]) for r in isolated] == [["answer-text-1"]]
        assert all(r["total_bytes"] <= 700 for r in receipts)


@pytest.mark.parametrize(
    "names, key, message",
    [
        (["answer", "answer"], "processing_params.outputs[1].name", "duplicate output name"),
        (["my answer"], "processing_params.outputs[0].name", "may only use A-Z, a-z, 0-9"),
        (["ok", "réponse"], "processing_params.outputs[1].name", "may only use A-Z, a-z, 0-9"),
        (["a.b"], "processing_params.outputs[0].name", "may only use A-Z, a-z, 0-9"),
    ],
)
def test_output_names_are_config_errors_not_sanitised(tmp_path, capsys, names, key, message):
    data = _write_lines(tmp_path, GOOD)
    cfg = _config(tmp_path, data)
    cfg["processing_params"]["outputs"] = [
        {"name": n, "type": "batch_api", "prompt": "{{ question }}"} for n in names
    ]
    cfg["processing_params"]["output_schema"] = None
    assert _run(tmp_path, cfg, "names") == 2
    err = capsys.readouterr().err
    assert f"mmirage: config error: {key}: " in err and message in err
    assert repr(names[-1]) in err
    # Refused before any data was read: no export, no receipt, no invalid-rows file.
    assert not (tmp_path / "meta").exists() and not (tmp_path / "export.names.jsonl").exists()


def test_clean_input_lists_no_invalid_row(tmp_path, capsys):
    data = _write_lines(tmp_path, GOOD)
    assert _run(tmp_path, _config(tmp_path, data), "ok") == 0
    out = capsys.readouterr().out
    assert "invalid rows:        0" in out and "invalid row(s)" not in out
    assert len(_export(tmp_path, "ok")) == 3
    assert _invalid(tmp_path, "ok") == []


def test_corrupt_parquet_row_group_is_invalid_rows_not_a_crash(tmp_path, capsys):
    """A Parquet file whose footer is fine but whose second row group's data page is
    corrupt: those 10 rows are invalid (named), the run stops before submitting."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "corrupt.parquet"
    pq.write_table(
        pa.table({"question": [f"question {i}?" for i in range(30)]}),
        path,
        row_group_size=10,
        compression="NONE",
    )
    data = bytearray(path.read_bytes())
    offset = pq.ParquetFile(path).metadata.row_group(1).column(0).data_page_offset
    data[offset : offset + 40] = b"\xff" * 40
    path.write_bytes(bytes(data))
    cfg = base_config(tmp_path)
    cfg["loading_params"]["datasets"] = [
        {"path": str(path), "type": "parquet", "output_dir": str(tmp_path / "shards")}
    ]
    code = run_main(
        [
            "--config",
            write_config(tmp_path, cfg),
            "--export-prompts",
            str(tmp_path / "p.jsonl"),
            "--run-id",
            "pq",
        ]
    )
    assert code == 1
    invalid = _read_jsonl(tmp_path / "meta" / "batch_metadata.invalid_rows.pq.jsonl")
    assert sorted(e["source_index"] for e in invalid) == list(range(10, 20))
    assert all("row group 1 cannot be read" in e["reason"] for e in invalid)


# -- null values never render as the text "None" -------------------------------------------


def test_null_used_in_a_prompt_is_an_invalid_row_not_the_text_none(tmp_path, capsys):
    data = _write_lines(
        tmp_path,
        [
            {"question": "q0", "hint": "h0", "meta": {"author": "Ada"}, "tags": ["a", "b"]},
            {"question": "q1", "hint": None, "meta": {"author": "Bob"}, "tags": []},
            {"question": "q2", "hint": "h2", "meta": {"author": None}, "tags": ["c"]},
            {"question": "q3", "hint": "h3", "meta": {"author": "Cy"}, "tags": ["d", None]},
        ],
    )
    cfg = _config(tmp_path, data)
    cfg["processing_params"]["inputs"] += [
        # a declared default of null: the input may be null, but not rendered as null
        {"name": "hint", "key": "hint", "default": None},
        {"name": "meta", "key": "meta"},
        {"name": "tags", "key": "tags"},
    ]
    cfg["processing_params"]["outputs"][0]["prompt"] = (
        "{{ question }} / {{ hint }} / {{ meta.author }} / {{ tags }}"
    )
    assert _run(tmp_path, cfg, "nul") == 1
    invalid = _invalid(tmp_path, "nul")
    assert [(e["source_index"], e["input_name"]) for e in invalid] == [
        (1, "hint"),
        (2, "meta"),
        (3, "tags"),
    ]
    for e in invalid:
        assert "as the text 'None'" in e["reason"]
        assert "output 'answer'" in e["reason"]
        assert f"input {e['input_name']!r} holds null" in e["reason"]
    assert "None" not in json.dumps(_export_or_empty(tmp_path, "nul"))
    capsys.readouterr()


def _export_or_empty(tmp_path: Path, run_id: str) -> dict[str, Any]:
    path = tmp_path / f"export.{run_id}.jsonl"
    return _export(tmp_path, run_id) if path.exists() else {}


def test_guarded_nulls_still_render(tmp_path, capsys):
    """`{% if %}`, `or` and `default(..., true)` are the ways to use a nullable input."""
    data = _write_lines(
        tmp_path,
        [
            {"question": "q0", "hint": "h0", "meta": {"author": "Ada"}},
            {"question": "q1", "hint": None, "meta": {"author": None}},
        ],
    )
    cfg = _config(tmp_path, data)
    cfg["processing_params"]["inputs"] += [
        {"name": "hint", "key": "hint", "default": None},
        {"name": "meta", "key": "meta"},
    ]
    cfg["processing_params"]["outputs"][0]["prompt"] = (
        "{{ question }}{% if hint %} (hint: {{ hint }}){% endif %}"
        " by {{ meta.author or 'anonymous' }}{{ meta.author | default('', true) }}"
    )
    assert _run(tmp_path, cfg, "grd") == 0, capsys.readouterr()
    assert {cid: _content(r) for cid, r in _export(tmp_path, "grd").items()} == {
        "answer-text-0": "q0 (hint: h0) by AdaAda",
        "answer-text-1": "q1 by anonymous",
    }
    assert _invalid(tmp_path, "grd") == []


# -- parallel lists must line up ------------------------------------------------------------

QA_ROWS = [
    {"items": [{"q": "2+2?", "a": "4"}, {"q": "3+3?", "a": "6"}]},
    # the second answer is null: items[*].a drops it, so answers no longer line up
    {"items": [{"q": "1+1?", "a": "2"}, {"q": "5+5?", "a": None}, {"q": "4+4?", "a": "8"}]},
]
QA_PROMPT = "{% for q in questions %}{{ q }} -> {{ answers[loop.index0] }}\n{% endfor %}"


def test_parallel_lists_of_different_lengths_are_an_invalid_row(tmp_path, capsys):
    data = _write_lines(tmp_path, QA_ROWS)
    cfg = _config(tmp_path, data)
    cfg["processing_params"]["inputs"] = [
        {"name": "questions", "key": "items[*].q"},
        {"name": "answers", "key": "items[*].a"},
    ]
    cfg["processing_params"]["outputs"][0]["prompt"] = QA_PROMPT
    cfg["processing_params"]["output_schema"] = {"answer": "{{ answer }}"}
    assert _run(tmp_path, cfg, "par") == 1
    (bad,) = _invalid(tmp_path, "par")
    assert bad["source_index"] == 1 and bad["input_name"] == "answers, questions"
    assert "'answers' has 2, 'questions' has 3 items" in bad["reason"]
    assert "map(&field, items)" in bad["reason"]
    capsys.readouterr()
    # With --skip-invalid-rows the aligned row alone is sent, paired correctly.
    assert _run(tmp_path, cfg, "par2", "--skip-invalid-rows") == 0
    assert {cid: _content(r) for cid, r in _export(tmp_path, "par2").items()} == {
        "answer-text-0": "2+2? -> 4\n3+3? -> 6\n"
    }


def test_readme_pattern_keeps_nulls_and_the_lists_aligned(tmp_path, capsys):
    """README: `map(&a, items)` keeps a null per missing answer; the template guards it."""
    data = _write_lines(tmp_path, QA_ROWS)
    cfg = _config(tmp_path, data)
    cfg["processing_params"]["inputs"] = [
        {"name": "questions", "key": "map(&q, items)"},
        {"name": "answers", "key": "map(&a, items)"},
    ]
    cfg["processing_params"]["outputs"][0]["prompt"] = QA_PROMPT.replace(
        "answers[loop.index0]", "answers[loop.index0] or '(no answer)'"
    )
    cfg["processing_params"]["output_schema"] = {"answer": "{{ answer }}"}
    assert _run(tmp_path, cfg, "map") == 0, capsys.readouterr()
    assert _content(_export(tmp_path, "map")["answer-text-1"]) == (
        "1+1? -> 2\n5+5? -> (no answer)\n4+4? -> 8\n"
    )


def test_parallel_list_detection():
    from mmirage_beam.transforms.build import parallel_list_inputs

    pair = frozenset({"a", "b"})
    assert parallel_list_inputs("{% for x in a %}{{ b[loop.index0] }}{% endfor %}") == (pair,)
    assert parallel_list_inputs(
        "{% for i in range(a|length) %}{{ a[i] }}{{ b[i] }}{% endfor %}"
    ) == (pair,)
    assert parallel_list_inputs("{% for x in a|list %}{{ b[loop.index - 1] }}{% endfor %}") == (
        pair,
    )
    # Lists used side by side, not in step, are free to differ.
    assert parallel_list_inputs("{{ a | join(', ') }} {% for x in b %}{{ x }}{% endfor %}") == ()
    assert parallel_list_inputs("{% for x in a %}{{ b[0] }}{% endfor %}") == ()


def test_input_defaults_leave_the_source_columns_as_they_were(tmp_path, capsys, provider_env):
    """Issue 38: with ``remove_columns: false`` and no ``output_schema``, an input's
    ``default`` was written over the source row's null column of the same name, in the
    placeholders and the merged rows. As in MMIRAGE (inputs are variables of the
    templates, the row keeps its columns), a row's own columns come out as they went in;
    the default fills the prompt only."""
    from pipelines.merge import main as merge_main

    fake = provider_env
    data = _write_lines(
        tmp_path,
        [
            {"question": "first", "score": None, "ts": None, "note": None},
            {"question": "second", "score": 7, "ts": "2026-01-01", "note": "kept"},
        ],
    )
    cfg = _config(tmp_path, data, base_url=fake.openai_base_url)
    cfg["processing_params"]["remove_columns"] = False
    cfg["processing_params"]["output_schema"] = None
    cfg["processing_params"]["inputs"] += [
        {"name": "score", "key": "score", "default": -1},
        {"name": "ts", "key": "ts", "default": "never"},
        {"name": "note", "key": "note", "default": ""},
        {"name": "extra", "key": "note", "default": "none"},
    ]
    cfg["processing_params"]["outputs"][0]["prompt"] = "{{ question }} {{ score }} {{ ts }}"
    assert _run(tmp_path, cfg, "dflt", dry=False) == 0, capsys.readouterr()
    placeholders = _placeholders(tmp_path)
    merged_path = tmp_path / "merged.jsonl"
    cfg_path = str(tmp_path / "config.yaml")
    assert merge_main(["--config", cfg_path, "--output-path", str(merged_path)]) == 0
    merged = sorted(_read_jsonl(merged_path), key=lambda r: r["source_index"])
    for rows in (placeholders, merged):
        assert [(r["score"], r["ts"], r["note"]) for r in rows] == [
            (None, None, None),
            (7, "2026-01-01", "kept"),
        ]
        assert [r["extra"] for r in rows] == ["none", "kept"]  # an input of a new name
    prompts = sorted(_content(e["request"]) for e in fake.submitted_requests("openai"))
    assert prompts == ["first -1 never", "second 7 2026-01-01"]  # the defaults fill the prompt


def test_a_typod_input_key_is_named_as_the_yaml_keys_fault(tmp_path, capsys):
    """Every row refused for the same absent key (issue 38's newcomer: ``key: questoin``
    blamed 1,319 rows): each row's reason names the nearest key of the row, and the
    summary sends the user to ``processing_params.inputs``, not to the rows."""
    data = _write_lines(tmp_path, GOOD)
    cfg = _config(tmp_path, data)
    cfg["processing_params"]["inputs"][0]["key"] = "questoin"
    assert _run(tmp_path, cfg, "typo") == 1
    out = capsys.readouterr().out
    reasons = {e["reason"] for e in _invalid(tmp_path, "typo")}
    assert reasons == {
        "input 'question' (key 'questoin') is missing: the row has no key 'questoin' "
        "(did you mean 'question'?)"
    }
    assert "fix the key of input 'question' in processing_params.inputs, not the rows" in out
    assert "Fix these rows" not in out
