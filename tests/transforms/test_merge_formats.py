"""mmirage merge --output-format parquet|hf: the JSONL merge converted, streamed in
bounded batches; each format is read back with its own library (pyarrow.parquet,
datasets.load_from_disk) and compared with the JSONL merge of the same run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmirage_beam.io.formats import check_hf_folder, convert_merged_jsonl, derive_schema
from pipelines.merge import main as merge_main
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, base_config, write_config

FACTS_SCHEMA = {"numbers": "list", "count": {"type": "int", "min": 0, "max": 100}}
FAILING = {3, 17}  # invalid requests: their rows carry mmirage_errors, answers null


def _read_jsonl(path):
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x]


def _no_nulls(value):
    """Arrow has every column in every row (null where a JSON row lacks the key)."""
    if isinstance(value, dict):
        return {k: _no_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_no_nulls(v) for v in value]
    return value


@pytest.fixture
def merged_run(tmp_path, provider_env):
    fake = provider_env
    rows = [json.loads(x) for x in GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:40]]
    for i in FAILING:
        rows[i]["question"] += " FAKE_ERROR:invalid_request"
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = base_config(tmp_path, base_url=fake.openai_base_url)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    cfg["processing_params"]["outputs"].append(
        {
            "name": "facts",
            "type": "batch_api",
            "output_type": "JSON",
            "prompt": "Facts of: {{ question }}",
            "output_schema": FACTS_SCHEMA,
        }
    )
    cfg["processing_params"]["output_schema"]["count"] = "{{ facts.count }}"
    cfg["processing_params"]["output_schema"]["facts"] = "{{ facts }}"
    cfg["processing_params"]["output_schema"]["note"] = "Q: {{ question }}"
    path = write_config(tmp_path, cfg)
    assert submit_main(["--config", path, "--run-id", "fmt"]) == 0
    out = tmp_path / "merged.jsonl"
    assert merge_main(["--config", path, "--output-path", str(out)]) == 1  # 2 rows failed
    return path, _read_jsonl(out), _read_jsonl(tmp_path / "merged.errors.jsonl")


def test_a_parquet_path_without_the_flag_is_written_as_parquet(tmp_path, capsys, merged_run):
    """``--output-path OUT.parquet`` without ``--output-format``: Parquet, not JSONL bytes
    in a file that pyarrow then refuses (newcomer trial)."""
    import pyarrow.parquet as pq

    path, expected, _errors = merged_run
    parquet = tmp_path / "inferred.parquet"
    assert merge_main(["--config", path, "--output-path", str(parquet)]) == 1
    capsys.readouterr()
    rows = pq.read_table(parquet).to_pylist()
    assert [r["source_index"] for r in rows] == [m["source_index"] for m in expected]


def test_parquet_and_hf_read_back_as_the_jsonl_merge(tmp_path, capsys, merged_run):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    path, expected, expected_errors = merged_run
    assert [m["source_index"] for m in expected] == list(range(40))
    assert len(expected_errors) == 2 * len(FAILING)  # both outputs of each failing row

    parquet = tmp_path / "merged.parquet"
    code = merge_main(
        ["--config", path, "--output-path", str(parquet), "--output-format", "parquet"]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "rows written:        40" in out and f"merged file:         {parquet}" in out
    table = pq.read_table(parquet)
    schema = table.schema
    # derived from output_schema: a plain output is text, a declared int field an int
    assert schema.field("answer").type == pa.string()
    assert schema.field("count").type == pa.int64()
    assert schema.field("note").type == pa.string()
    assert schema.field("source_index").type == pa.int64()
    assert pa.types.is_struct(schema.field("facts").type)
    rows = table.to_pylist()
    assert [_no_nulls(r) for r in rows] == [_no_nulls(r) for r in expected]
    # the errors file stays JSONL, beside the output, the same as the JSONL merge's
    assert _read_jsonl(tmp_path / "merged.errors.jsonl") == expected_errors
    assert not list(tmp_path.glob("merged.parquet.*"))  # no temporary JSONL left

    folder = tmp_path / "merged_hf"
    code = merge_main(["--config", path, "--output-path", str(folder), "--output-format", "hf"])
    assert code == 1
    assert "rows written:        40" in capsys.readouterr().out
    ds = datasets.load_from_disk(str(folder))
    assert ds.num_rows == 40
    assert ds.features["count"] == datasets.Value("int64")
    assert ds.features["answer"] == datasets.Value("string")
    assert [_no_nulls(r) for r in ds] == [_no_nulls(r) for r in expected]
    assert _read_jsonl(tmp_path / "merged_hf.errors.jsonl") == expected_errors
    for i in FAILING:
        assert ds[i]["answer"] is None and ds[i]["count"] is None
        assert ds[i]["mmirage_errors"]["answer"]["type"] == "invalid_request_error"

    # a folder of other files is refused before anything runs (replacing an earlier
    # merge's folder: test_conversion_streams_in_batches_and_unifies_types)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    capsys.readouterr()
    code = merge_main(
        ["--config", path, "--output-path", str(tmp_path / "other"), "--output-format", "hf"]
    )
    assert code == 2 and "notes.txt" in capsys.readouterr().err
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_conversion_streams_in_batches_and_unifies_types(tmp_path):
    """Small batches (3 rows): a column null in the first batch and an int later is an
    int column; ints and floats are floats; a struct gains the keys seen later; a
    column holding numbers and text is JSON text. Rows in file order."""
    import datasets
    import pyarrow.parquet as pq

    rows = [
        {"source_index": i, "late": None if i < 4 else i, "x": 1 if i % 2 else 1.5}
        | {"meta": {"a": i} if i < 5 else {"a": i, "b": "z"}, "mixed": i if i < 3 else f"t{i}"}
        for i in range(10)
    ]
    src = tmp_path / "m.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    schema, as_json = derive_schema(str(src), {}, batch_rows=3)
    assert str(schema.field("late").type) == "int64"
    assert str(schema.field("x").type) == "double"
    assert str(schema.field("meta").type) == "struct<a: int64, b: string>"
    assert as_json == {"mixed"}

    n, as_json = convert_merged_jsonl(
        str(src), str(tmp_path / "m.parquet"), "parquet", [], None, batch_rows=3
    )
    assert n == 10 and as_json == {"mixed"}
    back = pq.read_table(tmp_path / "m.parquet").to_pylist()
    assert [r["source_index"] for r in back] == list(range(10))
    assert [r["mixed"] for r in back] == [json.dumps(r["mixed"]) for r in rows]
    assert [r["late"] for r in back] == [r["late"] for r in rows]
    assert pq.ParquetFile(tmp_path / "m.parquet").num_row_groups == 4  # one per batch

    convert_merged_jsonl(str(src), str(tmp_path / "hf"), "hf", [], None, batch_rows=20)
    check_hf_folder(str(tmp_path / "hf"))  # an earlier merge's folder may be replaced
    n, _ = convert_merged_jsonl(str(src), str(tmp_path / "hf"), "hf", [], None, batch_rows=3)
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == [
        "data-00000-of-00001.arrow",
        "dataset_info.json",
        "state.json",
    ]
    ds = datasets.load_from_disk(str(tmp_path / "hf"))
    assert n == 10 and ds["source_index"] == list(range(10))
    assert ds[6]["meta"] == {"a": 6, "b": "z"} and ds[0]["meta"] == {"a": 0, "b": None}
