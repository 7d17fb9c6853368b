"""Beam YAML pipelines (``python -m apache_beam.yaml.main``, and its ``run`` in this
process where a cold process adds nothing to what is checked) over the mmirage transforms:
rows read by Beam's own ReadFromJson / ReadFromParquet, submitted to the embedded fake
provider through the real SDKs, merged back, and checked against ``mmirage check`` /
``mmirage merge`` on the very files the YAML pipeline left."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import apache_beam as beam
import pytest
import yaml
from apache_beam.testing.util import assert_that, equal_to

from mmirage_beam.beam_yaml.transforms import AssignSourceIndex, SubmitBatches, build_config
from mmirage_beam.errors import ConfigError, InvalidRowsError
from mmirage_beam.testing import fake_answer_text
from pipelines.check import main as check_main
from pipelines.merge import main as merge_main
from tests.conftest import GSM8K_JSONL, GSM8K_PARQUET, REPO, base_config, write_config
from tests.sdk_validation import validate_export
from tests.slow_proxy import SlowProxy

PROMPT = "Answer concisely:\n{{ question }}"


def _read_jsonl(path):
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x]


def _gsm8k(n=None):
    rows = _read_jsonl(GSM8K_JSONL)
    return rows if n is None else rows[:n]


def _yaml_cmd(pipeline_file, env=None):
    """``python -m apache_beam.yaml.main`` with ``--runner=FnApiRunner`` as
    docs/beam-yaml.md says (the DirectRunner would first try to download Prism), and its
    environment: no API key but those of ``env``."""
    cmd = [
        sys.executable,
        "-m",
        "apache_beam.yaml.main",
        f"--yaml_pipeline_file={pipeline_file}",
        "--runner=FnApiRunner",
    ]
    full_env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    full_env.update(env or {})
    full_env["PYTHONPATH"] = str(REPO)
    return cmd, full_env


def _run_yaml_subprocess(pipeline_file, jinja=None, env=None, expect_ok=True):
    """:func:`_yaml_cmd` in a subprocess, from the repository root: the command exactly
    as docs/beam-yaml.md gives it (a cold process: imports, argument parsing, exit)."""
    cmd, full_env = _yaml_cmd(pipeline_file, env)
    if jinja:
        cmd.append("--jinja_variables=" + json.dumps(jinja))
    proc = subprocess.run(
        cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=540, check=False
    )
    if expect_ok:
        assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Downloading prism" not in proc.stderr  # offline, that is a failed download
    return proc


class _Finished(NamedTuple):
    returncode: int
    stderr: str


def _run_yaml(pipeline_file, jinja=None, env=None, expect_ok=True):
    """The same job as :func:`_run_yaml_subprocess`, run by ``apache_beam.yaml.main.run``
    in this process (a cold process costs ~16 s of imports per job, Beam YAML's ML
    providers included): same flags, same environment (no API key but those of
    ``env``), same folder. The process's exit is played at the end: the callbacks the
    mmirage transforms registered with ``atexit`` (the run's lease, the staging folder)
    run then, and the per-process lease cache is emptied, as a new process would have
    it. A failure is exit 1 with its traceback as the stderr."""
    import atexit
    import contextlib
    import io
    import traceback

    from apache_beam.yaml import main as yaml_main

    from mmirage_beam.beam_yaml import transforms as yaml_transforms

    cmd, full_env = _yaml_cmd(pipeline_file, env)
    argv = cmd[3:] + (["--jinja_variables=" + json.dumps(jinja)] if jinja else [])
    exits = []
    register = atexit.register

    def _register(func, *args, **kwargs):
        if getattr(func, "__module__", "").startswith("mmirage_beam"):
            exits.append((func, args, kwargs))
            return func
        return register(func, *args, **kwargs)

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    captured = io.StringIO()
    code = 0
    os.environ.clear()
    os.environ.update({k: v for k, v in full_env.items() if k != "PYTHONPATH"})
    os.chdir(REPO)
    atexit.register = _register
    try:
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            try:
                yaml_main.run(argv)
            except Exception:  # noqa: BLE001 - the process would print it and exit 1
                traceback.print_exc()
                code = 1
            finally:
                for func, args, kwargs in reversed(exits):
                    func(*args, **kwargs)
                yaml_transforms._HELD_PLANS.clear()
    finally:
        atexit.register = register
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    finished = _Finished(code, captured.getvalue())
    if expect_ok:
        assert finished.returncode == 0, finished.stderr[-4000:]
    return finished


def _keys(fake, provider):
    if provider == "openai":
        return {"OPENAI_API_KEY": "sk-test-openai", "MMIRAGE_OPENAI_BASE_URL": fake.openai_base_url}
    return {"ANTHROPIC_API_KEY": "sk-ant-test"}


def test_dry_run_of_the_bundled_yaml_pipeline_exports_valid_requests(tmp_path):
    """configs/beam_yaml/gsm8k_submit.yaml as shipped, as a dry run: every GSM8K row,
    both outputs, valid for the official SDK types; the source_index of each request
    pair names one row (content order)."""
    out = tmp_path / "out"
    _run_yaml_subprocess(
        "configs/beam_yaml/gsm8k_submit.yaml",
        {"export_prompts": str(out / "prompts.jsonl"), "out": str(out), "run_id": "dry1"},
    )
    export = out / "prompts.dry1.jsonl"
    n, problems = validate_export(export)
    rows = _gsm8k()
    assert problems == [] and n == 2 * len(rows) == 2638
    by_id = {ln["request"]["custom_id"]: ln["request"] for ln in _read_jsonl(export)}
    questions = []
    for i in range(len(rows)):
        solution = by_id[f"solution-text-{i}"]["body"]["messages"][0]["content"]
        grading = by_id[f"grading-text-{i}"]["body"]["messages"][0]["content"]
        question = solution.split("\n\n", 1)[1]
        assert f"Problem: {question}\n" in grading
        questions.append(question)
    assert sorted(questions) == sorted(r["question"] for r in rows)
    # the dry-run receipts, consolidated as `mmirage run --export-prompts` leaves them
    receipts = _read_jsonl(out / "batch_metadata.dry-run.text.dry1.jsonl")
    assert sum(r["submitted_request_count"] for r in receipts) == 2638
    assert not (out / "batch_metadata.dry-run.text.dry1.jsonl.parts").exists()
    assert not (out / "batch_metadata.staged.dry1").exists()  # removed once the job is over
    # the receipt rows the transform emits, written by Beam's WriteToJson
    written = [r for f in sorted(out.glob("receipt_rows*")) for r in _read_jsonl(f)]
    assert sorted(r["chunk_id"] for r in written) == sorted(r["chunk_id"] for r in receipts)


def test_dry_run_of_the_bundled_providers_pipeline_over_parquet(tmp_path):
    """configs/beam_yaml/gsm8k_parquet_providers.yaml: a `providers:` entry, rows from
    ReadFromParquet, a JMESPath filter over the nested conversations, Anthropic."""
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    _run_yaml(
        "configs/beam_yaml/gsm8k_parquet_providers.yaml",
        {"export_prompts": str(out / "p.jsonl"), "out": str(out), "run_id": "pq"},
    )
    n, problems = validate_export(out / "p.pq.jsonl")
    assert problems == [] and n == 1319
    prompts = sorted(
        ln["request"]["params"]["messages"][0]["content"] for ln in _read_jsonl(out / "p.pq.jsonl")
    )
    questions = [r["conversations"][0]["content"] for r in pq.read_table(GSM8K_PARQUET).to_pylist()]
    head = "Solve step by step, final number on its own line:\n"
    assert prompts == sorted(head + q for q in questions)


SUBMIT_INLINE = """
pipeline:
  transforms:
    - type: ReadFromJson
      config: {path: "@DATA@"}
    - type: PyTransform
      name: Submit
      input: ReadFromJson
      config:
        constructor: mmirage_beam.beam_yaml.transforms.SubmitBatches
        kwargs:
          run_id: r1
          index_field: idx
          processor: &proc
            provider: openai
            model: gpt-4.1-mini
            metadata_output_path: "@OUT@/meta/batch_metadata.jsonl"
            max_requests_per_chunk: 15
            base_url: ${MMIRAGE_OPENAI_BASE_URL}
          inputs: &inputs {question: question}
          outputs: &outputs
            - name: answer
              output_type: plain
              prompt: "{% raw %}Answer concisely:\\n{{ question }}{% endraw %}"
"""

MERGE_INLINE = """
pipeline:
  transforms:
    - type: ReadFromJson
      config: {path: "@DATA@"}
    - type: PyTransform
      input: ReadFromJson
      config:
        constructor: mmirage_beam.beam_yaml.transforms.MergeBatches
        kwargs:
          run_id: r1
          index_field: idx
          output_path: "@OUT@/yaml_merged.jsonl"
          processor:
            provider: openai
            model: gpt-4.1-mini
            metadata_output_path: "@OUT@/meta/batch_metadata.jsonl"
            max_requests_per_chunk: 15
            base_url: ${MMIRAGE_OPENAI_BASE_URL}
          inputs: {question: question}
          outputs:
            - name: answer
              output_type: plain
              prompt: "{% raw %}Answer concisely:\\n{{ question }}{% endraw %}"
          remove_columns: true
          output_schema:
            question: "{% raw %}{{ question }}{% endraw %}"
            answer: "{% raw %}{{ answer }}{% endraw %}"
"""


def _pipeline_file(tmp_path, name, text, **subs):
    for k, v in subs.items():
        text = text.replace(f"@{k}@", str(v))
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_yaml_submit_then_check_and_merge_by_yaml_and_cli(tmp_path, provider_env, monkeypatch):
    """ReadFromJson rows with an index column -> SubmitBatches (PyTransform) -> the
    fake OpenAI; `mmirage check` reads the receipts; MergeBatches and `mmirage merge`
    write the same merged file, every row joined with its own answer."""
    fake = provider_env
    rows = [{"idx": i, **r} for i, r in enumerate(_gsm8k(40))]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out"
    env = _keys(fake, "openai")
    _run_yaml(_pipeline_file(tmp_path, "submit.yaml", SUBMIT_INLINE, DATA=data, OUT=out), env=env)

    receipts = _read_jsonl(out / "meta" / "batch_metadata.text.r1.jsonl")
    assert not (out / "meta" / "batch_metadata.text.r1.jsonl.parts").exists()
    assert [r["submitted_request_count"] for r in receipts] == [15, 15, 10]
    mapping = {k: v for r in receipts for k, v in r["custom_id_to_source_index"].items()}
    assert mapping == {f"answer-text-{i}": i for i in range(40)}
    assert sorted(p.name for p in (out / "meta").iterdir()) == [
        "batch_metadata.run.r1.json",
        "batch_metadata.text.r1.jsonl",
    ]
    record = json.loads((out / "meta" / "batch_metadata.run.r1.json").read_text())
    assert record["finished"] is True and record["chunks_submitted"] == 3
    assert len(fake.submitted_requests("openai")) == 40
    assert len(fake.batches("openai")) == 3
    # the same pipeline again, same run_id: a resume; every request has a receipt
    again = _run_yaml(
        _pipeline_file(tmp_path, "submit.yaml", SUBMIT_INLINE, DATA=data, OUT=out), env=env
    )
    assert "40 request(s) already receipted are not sent again" in again.stderr
    assert len(fake.submitted_requests("openai")) == 40 and len(fake.batches("openai")) == 3
    assert _read_jsonl(out / "meta" / "batch_metadata.text.r1.jsonl") == receipts

    # the same config as an mmirage YAML file, for the CLI
    cfg = base_config(tmp_path, "openai", base_url=fake.openai_base_url, max_requests_per_chunk=15)
    cfg["processors"][0]["metadata_output_path"] = str(out / "meta" / "batch_metadata.jsonl")
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    cfg_path = write_config(tmp_path, cfg)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert check_main(["--config", cfg_path, "--run-id", "r1"]) == 0
    # a YAML run has no mmirage config: the receipts alone, the SDK's own base-URL variable
    monkeypatch.setenv("OPENAI_BASE_URL", fake.openai_base_url)
    receipt = str(out / "meta" / "batch_metadata.text.r1.jsonl")
    assert check_main(["--metadata-path", receipt]) == 0
    monkeypatch.delenv("OPENAI_BASE_URL")

    _run_yaml(_pipeline_file(tmp_path, "merge.yaml", MERGE_INLINE, DATA=data, OUT=out), env=env)
    merged = _read_jsonl(out / "yaml_merged.jsonl")
    assert [m["question"] for m in merged] == [r["question"] for r in rows]
    for m, r in zip(merged, rows):
        assert m["answer"] == fake_answer_text("Answer concisely:\n" + r["question"])
    assert (out / "yaml_merged.errors.jsonl").read_text() == ""

    cli_out = tmp_path / "cli_merged.jsonl"
    assert merge_main(["--config", cfg_path, "--output-path", str(cli_out), "--run-id", "r1"]) == 0
    assert cli_out.read_bytes() == (out / "yaml_merged.jsonl").read_bytes()


def test_yaml_merge_leaves_the_answers_file_and_merge_record_of_mmirage_merge(
    tmp_path, provider_env, monkeypatch
):
    """MergeBatches plans and finishes its merge with `mmirage merge`'s own steps
    (run.merge_plans): beside the merged and errors files it leaves the answers file
    later runs reuse and the merge record `mmirage runs` and `run --wait` read, as
    `mmirage merge` does; its record holds the counts its files show (a step of a job
    cannot read the job's counters). A YAML merge used to leave neither file."""
    fake = provider_env
    rows = [{"idx": i, **r} for i, r in enumerate(_gsm8k(20))]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out, meta = tmp_path / "out", tmp_path / "out" / "meta"
    env = _keys(fake, "openai")
    _run_yaml(_pipeline_file(tmp_path, "submit.yaml", SUBMIT_INLINE, DATA=data, OUT=out), env=env)
    _run_yaml(_pipeline_file(tmp_path, "merge.yaml", MERGE_INLINE, DATA=data, OUT=out), env=env)
    record = json.loads((meta / "batch_metadata.merge.r1.json").read_text(encoding="utf-8"))
    answers = (meta / "batch_metadata.answers.r1.jsonl").read_bytes()
    assert len(_read_jsonl(meta / "batch_metadata.answers.r1.jsonl")) == 20
    assert record["runs"] == ["r1"] and record["output_path"] == str(out / "yaml_merged.jsonl")
    assert record["stats"] == {"rows_written": 20, "rows_with_failures": 0, "unknown_custom_ids": 0}

    # `mmirage merge` of the same run: the same answers, a record that says the same
    cfg = base_config(tmp_path, "openai", base_url=fake.openai_base_url, max_requests_per_chunk=15)
    cfg["processors"][0]["metadata_output_path"] = str(meta / "batch_metadata.jsonl")
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    cli_out = tmp_path / "cli_merged.jsonl"
    args = ["--config", write_config(tmp_path, cfg), "--output-path", str(cli_out)]
    assert merge_main([*args, "--run-id", "r1"]) == 0
    cli = json.loads((meta / "batch_metadata.merge.r1.json").read_text(encoding="utf-8"))
    assert (meta / "batch_metadata.answers.r1.jsonl").read_bytes() == answers
    assert cli["output_path"] == str(cli_out)
    for key in ("run_id", "runs", "failed_by_type", "retryable"):
        assert record[key] == cli[key], key
    for key, count in record["stats"].items():
        assert cli["stats"].get(key, 0) == count, key


def test_two_yaml_submit_jobs_on_one_run_id_the_second_is_refused(tmp_path, provider_env):
    """SubmitBatches takes the run's lease as `mmirage run` does (run.plans.prepare_submit):
    while a first YAML job on run r1 is held inside a batch create, a second one is
    refused before sending anything; once the first finished, the second sends nothing.
    The fake sees every request once."""
    fake = provider_env
    rows = [{"idx": i, **r} for i, r in enumerate(_gsm8k(40))]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out"
    pipeline_file = _pipeline_file(tmp_path, "submit.yaml", SUBMIT_INLINE, DATA=data, OUT=out)
    lease = out / "meta" / "batch_metadata.lease.r1"
    with SlowProxy(fake.base_url) as proxy:
        proxy.delay("POST", "/v1/batches", 60.0)
        env = {
            "OPENAI_API_KEY": "sk-test-openai",
            "MMIRAGE_OPENAI_BASE_URL": proxy.base_url + "/v1",
        }
        cmd, full_env = _yaml_cmd(pipeline_file, env)
        first = subprocess.Popen(
            cmd, cwd=REPO, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            deadline = time.monotonic() + 240
            while proxy.delayed < 1:  # the first job is inside its first batch create
                assert first.poll() is None, first.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "the first job never created a batch"
                time.sleep(0.2)
            assert lease.exists()
            second = _run_yaml(pipeline_file, env=env, expect_ok=False)
            assert second.returncode != 0
            assert "run r1 is in use by another process" in second.stderr, second.stderr[-3000:]
            assert "nothing was sent" in second.stderr
            proxy.release()  # the refusal was seen: let the first job's create answer
            _, err = first.communicate(timeout=400)
        finally:
            if first.poll() is None:
                first.kill()
        assert first.returncode == 0, err[-4000:]
    assert not lease.exists()  # released when the first job's process ended
    sent = collections.Counter(r["custom_id"] for r in fake.submitted_requests("openai"))
    assert sorted(sent) == sorted(f"answer-text-{i}" for i in range(40))
    assert set(sent.values()) == {1}
    assert len(fake.batches("openai")) == 3
    # the first one finished: the same job again takes the lease and sends nothing
    again = _run_yaml(pipeline_file, env=_keys(fake, "openai"))
    assert "40 request(s) already receipted are not sent again" in again.stderr
    assert len(fake.submitted_requests("openai")) == 40 and len(fake.batches("openai")) == 3


MMIRAGE_CONFIG_PARQUET = {
    "inputs": [{"name": "question", "key": "conversations[0].content"}],
    "outputs": [{"name": "answer", "type": "batch_api", "prompt": PROMPT}],
}

PROVIDER_PIPELINE = """
providers:
  - type: python
    config: {}
    transforms:
      MmirageSubmit: mmirage_beam.beam_yaml.transforms.SubmitBatches
      MmirageMerge: mmirage_beam.beam_yaml.transforms.MergeBatches
pipeline:
  transforms:
    - type: ReadFromParquet
      config: {path: "@DATA@"}
    - type: "@STEP@"
      input: ReadFromParquet
      config:
        config: "@CONFIG@"
        run_id: p1
        @EXTRA@
"""


def test_providers_entry_submit_and_merge_parquet_in_content_order(tmp_path, provider_env):
    """A `providers:` entry (type: python, no packages) names the transforms; rows come
    from ReadFromParquet without an index column, so source_index is the content order;
    the mmirage YAML config file gives the prompt. Merge joins every row with the answer
    to its own prompt (Anthropic through the fake)."""
    import pyarrow.parquet as pq

    fake = provider_env
    table = pq.read_table(GSM8K_PARQUET).slice(0, 30)
    data = tmp_path / "rows.parquet"
    pq.write_table(table, data)
    out = tmp_path / "out"
    cfg = base_config(tmp_path, "anthropic", base_url=fake.anthropic_base_url)
    cfg["processors"][0]["metadata_output_path"] = str(out / "batch_metadata.jsonl")
    cfg["processing_params"].update(MMIRAGE_CONFIG_PARQUET)
    cfg["processing_params"]["output_schema"] = {
        "id": "{{ question }}",
        "answer": "{{ answer }}",
    }
    cfg_path = write_config(tmp_path, cfg)
    env = _keys(fake, "anthropic")
    subs = {"DATA": data, "CONFIG": cfg_path}
    _run_yaml(
        _pipeline_file(
            tmp_path, "s.yaml", PROVIDER_PIPELINE, STEP="MmirageSubmit", EXTRA="", **subs
        ),
        env=env,
    )
    receipts = _read_jsonl(out / "batch_metadata.text.p1.jsonl")
    assert sorted(i for r in receipts for i in r["custom_id_to_source_index"].values()) == list(
        range(30)
    )
    merged_path = out / "merged.jsonl"
    _run_yaml(
        _pipeline_file(
            tmp_path,
            "m.yaml",
            PROVIDER_PIPELINE,
            STEP="MmirageMerge",
            EXTRA=f'output_path: "{merged_path}"',
            **subs,
        ),
        env=env,
    )
    merged = _read_jsonl(merged_path)
    questions = [r["conversations"][0]["content"] for r in table.to_pylist()]
    assert sorted(m["id"] for m in merged) == sorted(questions)
    for m in merged:
        assert m["answer"] == fake_answer_text("Answer concisely:\n" + m["id"])
    assert (out / "merged.errors.jsonl").read_text() == ""
    assert len(fake.submitted_requests("anthropic")) == 30


def test_a_bad_argument_fails_the_yaml_pipeline_naming_the_key_and_line(tmp_path):
    text = SUBMIT_INLINE.replace("{{ question }}", "{{ qestion }}")
    proc = _run_yaml(
        _pipeline_file(tmp_path, "bad.yaml", text, DATA=GSM8K_JSONL, OUT=tmp_path),
        env={"OPENAI_API_KEY": "sk-test", "MMIRAGE_OPENAI_BASE_URL": "http://127.0.0.1:9"},
        expect_ok=False,
    )
    assert proc.returncode != 0
    assert 'Error applying transform "Submit" at line' in proc.stderr
    assert (
        "SubmitBatches.config.outputs[0].prompt: uses undefined variable 'qestion'" in proc.stderr
    )
    assert not (tmp_path / "meta").exists()  # nothing written


# --- in-process: arguments, indices and the barrier -------------------------------------


def _inline(tmp_path, **overrides):
    args = {
        "processor": {"provider": "openai", "metadata_output_path": str(tmp_path / "m.jsonl")},
        "inputs": {"question": "question"},
        "outputs": [{"name": "answer", "prompt": PROMPT}],
    }
    args.update(overrides)
    return args


@pytest.mark.parametrize(
    "overrides, key",
    [
        ({"outputs": [{"name": "answer", "prompt": "{{ nope }}"}]}, "outputs[0].prompt"),
        ({"outputs": [{"name": "answer", "prompt": PROMPT, "output_tpye": "JSON"}]}, None),
        ({"inputs": {"question": "question[?"}}, "inputs[0].key"),
        ({"processor": {"provider": "openai", "modle": "x"}}, "processor.modle"),
        ({"processor": {"provider": "openai", "temperature": 5}}, "processor.temperature"),
        ({"processor": {"provider": "openai"}}, "processor.metadata_output_path"),
        ({"inputs": None}, "inputs"),
        ({"output_dir": 3}, "output_dir"),
    ],
)
def test_bad_arguments_name_the_key(tmp_path, overrides, key):
    with pytest.raises(ConfigError) as info:
        SubmitBatches(export_prompts=str(tmp_path / "p.jsonl"), **_inline(tmp_path, **overrides))
    if key is None:
        key = info.value.key.split("SubmitBatches.config.", 1)[1]
        assert key.startswith(("outputs[0].output_tpye", "output_dir")), info.value
    assert info.value.key == f"SubmitBatches.config.{key}", info.value


def test_config_file_and_inline_arguments_are_exclusive(tmp_path):
    cfg_path = write_config(tmp_path, base_config(tmp_path))
    with pytest.raises(ConfigError, match="outputs: cannot be given together with config"):
        build_config(cfg_path, outputs=[{"name": "a", "prompt": "x"}])
    cfg = build_config(cfg_path)
    assert [d.path for d in cfg.datasets] == ["<rows of the Beam YAML pipeline>"]
    assert cfg.datasets[0].output_dir == str(tmp_path / "shards")


def test_submit_needs_the_api_key_before_the_job_starts(tmp_path):
    from mmirage_beam.errors import CredentialsError

    with pytest.raises(CredentialsError, match="OPENAI_API_KEY"):
        SubmitBatches(**_inline(tmp_path))


def test_index_field_must_be_unique_non_negative_integers():
    rows = [
        beam.Row(idx=0, q="a"),
        beam.Row(idx=1, q="b"),
        beam.Row(idx=1, q="c"),
        beam.Row(idx=-2, q="d"),
        beam.Row(idx=None, q="e"),
    ]
    with beam.Pipeline() as p:
        out = p | beam.Create(rows) | AssignSourceIndex("idx")
        assert_that(
            out["rows"] | "R" >> beam.Map(lambda r: (r.source_index, r.row["q"])),
            equal_to([(0, "a")]),
            label="rows",
        )
        assert_that(
            out["errors"] | "E" >> beam.Map(lambda e: (e.source_index, e.reason[:30])),
            equal_to(
                [
                    (1, "index_field 'idx' value 1 is s"),
                    (1, "index_field 'idx' value 1 is s"),
                    (None, "index_field 'idx' must hold a "),
                    (None, "index_field 'idx' must hold a "),
                ]
            ),
            label="errors",
        )


def test_content_order_index_does_not_depend_on_read_order():
    """Without index_field, source_index is the rank by (SHA-256 of the canonical JSON,
    that JSON), whatever order the rows arrive in."""
    import hashlib

    rows = [beam.Row(q=r["question"][:40], a=r["answer"][-8:]) for r in _gsm8k(50)]

    def canonical(r):
        return json.dumps(
            {"a": r.a, "q": r.q}, sort_keys=True, ensure_ascii=False, separators=(",", ":")
        )

    ranked = sorted(
        rows, key=lambda r: (hashlib.sha256(canonical(r).encode()).hexdigest(), canonical(r))
    )
    expected = [(i, r.q) for i, r in enumerate(ranked)]
    for n, ordering in enumerate((rows, list(reversed(rows)))):
        with beam.Pipeline() as p:
            out = p | beam.Create(ordering, reshuffle=True) | AssignSourceIndex()
            assert_that(
                out["rows"] | beam.Map(lambda r: (r.source_index, r.row["q"])),
                equal_to(expected),
                label=f"order{n}",
            )


def test_invalid_rows_stop_the_job_and_name_the_row(tmp_path):
    """A row whose input is null: nothing exported, the job fails with the row's
    source_index, and the invalid-rows file lists it."""
    rows = [beam.Row(idx=i, question=r["question"]) for i, r in enumerate(_gsm8k(5))]
    rows[3] = beam.Row(idx=3, question=None)
    submit = SubmitBatches(
        export_prompts=str(tmp_path / "p.jsonl"),
        run_id="bad1",
        index_field="idx",
        **_inline(tmp_path),
    )
    with pytest.raises(Exception) as info:
        with beam.Pipeline() as p:
            _ = p | beam.Create(rows) | submit
    assert "1 invalid row(s)" in str(info.value) and "source_index 3" in str(info.value)
    assert isinstance(info.value, InvalidRowsError) or "InvalidRowsError" in str(info.value)
    assert not (tmp_path / "p.bad1.jsonl").exists()


def test_bundled_yaml_examples_parse(tmp_path):
    from apache_beam.yaml.yaml_transform import expand_jinja

    for path in sorted((REPO / "configs" / "beam_yaml").glob("*.yaml")):
        text = expand_jinja(path.read_text(encoding="utf-8"), {})
        spec = yaml.safe_load(text)
        assert spec["pipeline"]["transforms"], path


PACKAGES_PIPELINE = """
providers:
  - type: python
    config:
      packages: ["@WHEEL@"]
    transforms:
      MmirageSubmit: mmirage_beam.beam_yaml.transforms.SubmitBatches
pipeline:
  transforms:
    - type: ReadFromJson
      config: {path: "@DATA@"}
    - type: MmirageSubmit
      input: ReadFromJson
      config:
        run_id: pk
        export_prompts: "@OUT@/p.jsonl"
        processor: {provider: openai, metadata_output_path: "@OUT@/meta.jsonl"}
        inputs: {question: question}
        outputs:
          - name: answer
            prompt: "{% raw %}Answer concisely:\\n{{ question }}{% endraw %}"
"""


@pytest.mark.skipif(
    os.environ.get("MMIRAGE_TEST_YAML_PACKAGES") != "1",
    reason="opt-in (MMIRAGE_TEST_YAML_PACKAGES=1): Beam builds a ~1.4 GB virtualenv from "
    "the package index on first use (about 20 minutes here), then ~1 GB per wheel",
)
def test_providers_entry_with_packages_installs_a_wheel_in_a_new_environment(tmp_path):
    """`type: python` with `packages:`: Beam clones a virtualenv of its own, pip installs
    the wheel there, and expands the transform in an expansion service running in it.
    A folder is refused by Beam (it hashes the file), so the wheel is built first."""
    from apache_beam.yaml.yaml_provider import PypiExpansionService

    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)],
        check=True,
        timeout=300,
    )
    wheel = next(wheels.glob("mmirage_beam-*.whl"))
    out = tmp_path / "out"
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in _gsm8k(50)), encoding="utf-8")
    clone = PypiExpansionService._path(sys.executable, [str(wheel)])
    try:
        _run_yaml_subprocess(
            _pipeline_file(tmp_path, "pk.yaml", PACKAGES_PIPELINE, WHEEL=wheel, DATA=rows, OUT=out)
        )
    finally:  # the per-wheel clone; Beam's base environment stays cached
        import shutil

        shutil.rmtree(clone, ignore_errors=True)
        Path(clone + "-requirements.txt").unlink(missing_ok=True)
    n, problems = validate_export(out / "p.pk.jsonl")
    assert problems == [] and n == 50
