"""Regenerate the small reader test inputs in this folder: ``python make_files.py``.

The files are committed; this script only documents exactly how they were made.
"""

from __future__ import annotations

import datetime
import decimal
import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).parent


def messy_jsonl() -> None:
    lines = [
        b'\xef\xbb\xbf{"id": 0, "text": "first"}\r\n',  # BOM + CRLF
        b"\r\n",  # blank (CRLF)
        b"   \t\r\n",  # whitespace only
        '{"id": 1, "text": "café ’"}\r\n'.encode(),
        b"not json at all\r\n",  # error: not JSON
        b"[1, 2, 3]\r\n",  # error: JSON array
        b"\n",  # blank (LF)
        b'{"id": 2, "bad": "<\xff\xfe>"}\n',  # error: invalid UTF-8
        b'{"id": 3, "x": NaN, "y": 1.5}\n',  # NaN literal -> None
        b'"just a string"\n',  # error: JSON string
        b'{"id": 4, "nested": {"a": [1, {"b": null}]}}',  # no final newline
    ]
    (HERE / "messy.jsonl").write_bytes(b"".join(lines))


def parts_dir() -> None:
    parts = HERE / "parts"
    parts.mkdir(exist_ok=True)
    (parts / "part-00000.jsonl").write_text('{"part": 0, "i": 0}\n{"part": 0, "i": 1}\n')
    (parts / "part-00001.jsonl").write_text('{"part": 1, "i": 0}\n{oops\n\n{"part": 1, "i": 2}\n')
    (parts / "_SUCCESS").write_text("")
    (parts / "notes.txt").write_text("not a data file\n")
    with gzip.open(HERE / "small.jsonl.gz", "wb") as f:
        f.write(b"".join(json.dumps({"g": i}).encode() + b"\n" for i in range(5)))


def typed_parquet() -> None:
    utc = datetime.timezone.utc
    table = pa.table(
        {
            "i64": pa.array([1, 2, 3, None, 5], pa.int64()),
            "i8": pa.array([-1, 0, 1, 2, 127], pa.int8()),
            "f64": pa.array([1.5, float("nan"), float("inf"), None, -0.25], pa.float64()),
            "f32": pa.array([0.5, 1.0, float("-inf"), 2.0, None], pa.float32()),
            "flag": pa.array([True, False, None, True, False]),
            "s": pa.array(["a", "", None, "é’", "e"]),
            "ints": pa.array([[1, 2], [], None, [3], [4, 5, 6]], pa.list_(pa.int64())),
            "floats": pa.array(
                [[1.0, float("nan")], [None], [], [2.5], None], pa.list_(pa.float64())
            ),
            "st": pa.array(
                [
                    {"a": 1, "b": [0.5, float("nan")], "c": "x"},
                    {"a": None, "b": [], "c": None},
                    None,
                    {"a": 4, "b": None, "c": "w"},
                    {"a": 5, "b": [1.0], "c": "v"},
                ],
                pa.struct([("a", pa.int64()), ("b", pa.list_(pa.float64())), ("c", pa.string())]),
            ),
            "blob": pa.array([b"\x00\x01\xff", b"hello", None, b"", b"\x89PNG"], pa.binary()),
            "ts": pa.array(
                [
                    datetime.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=utc),
                    None,
                    datetime.datetime(1999, 12, 31, 23, 59, 59, tzinfo=utc),
                    datetime.datetime(2024, 1, 2, tzinfo=utc),
                    datetime.datetime(2024, 1, 2, tzinfo=utc),
                ],
                pa.timestamp("us", tz="UTC"),
            ),
            "day": pa.array(
                [
                    datetime.date(2024, 2, 29),
                    None,
                    datetime.date(2000, 1, 1),
                    datetime.date(2024, 1, 1),
                    datetime.date(2024, 1, 2),
                ],
                pa.date32(),
            ),
            "m": pa.array(
                [[("k", 1)], [], None, [("x", 2), ("y", 3)], [("z", None)]],
                pa.map_(pa.string(), pa.int64()),
            ),
            "dec": pa.array(
                [decimal.Decimal(v) if v else None for v in ("1.25", "", "-3.50", "0", "10.01")],
                pa.decimal128(10, 2),
            ),
            "cat": pa.array(["u", "v", "u", None, "v"]).dictionary_encode(),
        }
    )
    pq.write_table(table, HERE / "typed.parquet", row_group_size=2)


def pandas_parquet() -> None:
    # Written from numpy-typed pandas columns (object column holding numpy arrays).
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame(
        {
            "n32": np.array([1, 2, 3], dtype=np.int32),
            "u8": np.array([0, 128, 255], dtype=np.uint8),
            "x": np.array([1.5, np.nan, np.inf], dtype=np.float64),
            "vec": [np.array([1.0, np.nan]), np.array([], dtype=np.float64), np.array([2.0])],
            "ok": np.array([True, False, True]),
        }
    )
    frame.to_parquet(HERE / "numpy_pandas.parquet", engine="pyarrow", index=False)


def hf_dirs() -> None:
    # A HF save_to_disk-like directory whose Arrow file uses the IPC *file* format
    # (two record batches), to cover both IPC formats.
    d = HERE / "hf_ipc_file_format"
    d.mkdir(exist_ok=True)
    schema = pa.schema([("n", pa.int64()), ("f", pa.float64()), ("b", pa.binary())])
    with pa.OSFile(str(d / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_file(sink, schema) as writer:
            writer.write_batch(
                pa.record_batch([[0, 1], [0.5, float("nan")], [b"ab", None]], schema=schema)
            )
            writer.write_batch(pa.record_batch([[2], [None], [b"\xff"]], schema=schema))
    state = {"_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_split": None}
    (d / "state.json").write_text(json.dumps(state, indent=2) + "\n")
    dd = HERE / "hf_dataset_dict"
    dd.mkdir(exist_ok=True)
    (dd / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}) + "\n")


if __name__ == "__main__":
    messy_jsonl()
    parts_dir()
    typed_parquet()
    pandas_parquet()
    hf_dirs()
