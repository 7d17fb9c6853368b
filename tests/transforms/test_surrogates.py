"""Lone UTF-16 surrogates (JSON ``"\\ud800"``): read as they are, an input holding one is
an invalid row naming the row and the input, and rows are written back as they were read.

Elements holding a lone surrogate cannot cross a Beam coder (UTF-8 strings), so the
pipelines below turn them into ``ascii()`` text in the same fused stage before any
assertion; the mmirage pipelines keep such rows inside fused stages and write them as
bytes (``jsonl.json_line``)."""

from __future__ import annotations

import json

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from mmirage_beam.config.loader import DatasetConfig, InputConfig
from mmirage_beam.io.readers import ReadDatasets
from mmirage_beam.jsonl import json_line, lone_surrogate_at
from mmirage_beam.records import SourceRow
from mmirage_beam.transforms.build import ExtractInputs

LINES = [
    r'{"q": "clean", "n": ["a"]}',
    r'{"q": "bad \ud800 here", "n": []}',
    r'{"q": "ok", "n": ["fine", "x\udfff"]}',
    r'{"q": "ok", "n": [{"\udc00": 1}]}',
    r'{"q": "paired \ud83d\ude00 is one character", "n": []}',
    r'{"q": "ok", "n": [], "other": "not an input \udbff"}',
]
ROWS = [json.loads(line) for line in LINES]


def test_where_a_lone_surrogate_is():
    assert lone_surrogate_at("plain ascii") is None
    assert lone_surrogate_at("é 😀 中") is None
    assert lone_surrogate_at(ROWS[1]["q"]) == "'\\ud800' at character 4"
    assert lone_surrogate_at(ROWS[2]["n"]) == "[1]: '\\udfff' at character 1"
    assert lone_surrogate_at(ROWS[3]["n"]) == "[0]: the key '\\udc00'"
    assert lone_surrogate_at({"a": [1, {"b": "\udfff"}]}) == "a[1].b: '\\udfff' at character 0"
    assert lone_surrogate_at(ROWS[4]) is None and lone_surrogate_at(None) is None


def test_json_line_writes_lone_surrogates_as_the_escapes_they_were_read_from():
    for row in ROWS:
        out = json_line(row)
        assert out.decode("utf-8")  # valid UTF-8
        assert json.loads(out) == row  # decodes back to what was read
        if lone_surrogate_at(row) is None:  # other rows: byte for byte as before
            assert out == (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
    assert json_line(ROWS[1]) == b'{"q": "bad \\ud800 here", "n": []}\n'
    assert json_line({"\udc00k": "\u00e9"}) == '{"\\udc00k": "\u00e9"}\n'.encode()


def _run_extract(lenient: bool, expected_rows: list, expected_errors: list) -> None:
    ds = DatasetConfig(path="rows.jsonl", type="JSONL")
    inputs = [InputConfig("q", "q"), InputConfig("n", "n")]
    with BeamTestPipeline() as p:
        rows = p | beam.Create([SourceRow(i, 0, r) for i, r in enumerate(ROWS)])
        out = rows | ExtractInputs(inputs, [ds], lenient=lenient)
        kept = out.rows | "Ascii" >> beam.Map(lambda e: (e.source_index, ascii(e.values)))
        errors = out.errors | "Named" >> beam.Map(
            lambda e: (e.source_index, e.input_name, e.reason.split(" holds ")[1].split("), a ")[0])
        )
        assert_that(kept, equal_to(expected_rows), label="Rows")
        assert_that(errors, equal_to(expected_errors), label="Errors")


def test_an_input_holding_one_is_an_invalid_row_naming_the_row_and_the_input():
    def values(i):
        return ascii({"q": ROWS[i]["q"], "n": ROWS[i]["n"]})

    # Row 5's surrogate is in a column that is not an input: it is not sent, so the row
    # is valid (and written back as read).
    _run_extract(
        lenient=False,
        expected_rows=[(i, values(i)) for i in (0, 4, 5)],
        expected_errors=[
            (1, "q", "a lone UTF-16 surrogate ('\\ud800' at character 4"),
            (2, "n", "a lone UTF-16 surrogate ([1]: '\\udfff' at character 1"),
            (3, "n", "a lone UTF-16 surrogate ([0]: the key '\\udc00'"),
        ],
    )
    # Merge re-reads rows leniently, to write skipped rows as the source held them.
    _run_extract(lenient=True, expected_rows=[(i, values(i)) for i in range(6)], expected_errors=[])


def test_the_reader_keeps_what_the_line_held(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    with BeamTestPipeline() as p:
        read = p | ReadDatasets([DatasetConfig(path=str(path), type="JSONL")])
        rows = read.rows | beam.Map(lambda r: (r.source_index, ascii(r.row)))
        assert_that(rows, equal_to([(i, ascii(r)) for i, r in enumerate(ROWS)]), label="Rows")
        assert_that(read.errors, equal_to([]), label="NoErrors")
