"""SubmitSettings / MergeSettings: checked once, frozen, picklable, and the transforms
still take the old keyword arguments."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest

from mmirage_beam import MergeRows, SubmitRows
from mmirage_beam.config import load_config
from mmirage_beam.errors import ConfigError
from mmirage_beam.settings import MergeSettings, SubmitSettings

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "gsm8k_openai.yaml"


def test_submit_settings_normalise_and_pickle():
    s = SubmitSettings("run1", exclude_custom_ids=["a", "b"], estimate_fraction="0.25")
    assert s.exclude_custom_ids == frozenset({"a", "b"})
    assert s.estimate_fraction == 0.25
    assert s.selection == (frozenset({"a", "b"}), False)
    assert not s.dry_run
    assert pickle.loads(pickle.dumps(s)) == s
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.run_id = "other"  # type: ignore[misc]


@pytest.mark.parametrize("fraction", [0, 1.5, "x", float("nan")])
def test_a_bad_estimate_fraction_names_the_flag(fraction):
    with pytest.raises(ConfigError, match="--estimate-fraction"):
        SubmitSettings("run1", estimate_fraction=fraction)


@pytest.mark.parametrize("kwargs", [{"attempt": 0}, {"chunking_parallelism": 0}, {"run_id": ""}])
def test_out_of_range_submit_settings_are_refused(kwargs):
    with pytest.raises(ConfigError):
        SubmitSettings(**{"run_id": "run1", **kwargs})


def test_the_submit_step_is_pickled_without_the_id_sets():
    s = SubmitSettings("run1", only_custom_ids={"x"}, parent_run_id="p")
    slim = s.for_submit_step()
    assert slim.only_custom_ids is None and slim.exclude_custom_ids == frozenset()
    assert slim.parent_run_id == "p" and slim.run_id == "run1"


def test_submit_rows_takes_settings_or_the_old_keywords():
    config = load_config(str(CONFIG))
    by_keywords = SubmitRows(config, "run1", export_prompts="/tmp/x.jsonl", attempt=2)
    by_object = SubmitRows(config, SubmitSettings("run1", export_prompts="/tmp/x.jsonl", attempt=2))
    assert by_keywords.settings == by_object.settings
    assert by_object.dry_run and by_object.run_id == "run1"
    assert by_object.settings.skip_invalid_rows == config.execution.skip_invalid_rows
    with pytest.raises(TypeError, match="attempt"):
        SubmitRows(config, SubmitSettings("run1"), attempt=3)


def test_merge_settings_and_merge_rows():
    config = load_config(str(CONFIG))
    s = MergeSettings("/out/m.jsonl", invalid_rows_files=["a"], unsubmitted_run=["r", "cmd"])
    assert s.errors_file == "/out/m.errors.jsonl"
    assert s.invalid_rows_files == ("a",) and s.unsubmitted_run == ("r", "cmd")
    assert pickle.loads(pickle.dumps(s)) == s
    merge = MergeRows(config, [], [], {}, "/out/m.jsonl", num_partitions=3)
    assert merge.settings == MergeSettings("/out/m.jsonl", num_partitions=3)
    for bad in ({"num_partitions": 0}, {"rows_per_partition": 0}, {"output_path": ""}):
        with pytest.raises(ConfigError):
            MergeSettings(**{"output_path": "/out/m.jsonl", **bad})
