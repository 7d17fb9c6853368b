"""Scale-out core: paths resolved in the launcher, strict flags, storage the launcher and
the workers both see, mem:// end to end, chunking parallelism, and graceful stops."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mmirage_beam.config import load_config
from mmirage_beam.paths import resolve_path
from pipelines.merge import main as merge_main
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, REPO, base_config, write_config
from tests.runners import run_cli_in_process


def _relative_config(tmp_path: Path, **proc) -> dict:
    cfg = base_config(tmp_path, **proc)
    cfg["processors"][0]["metadata_output_path"] = "meta/batch_metadata.jsonl"
    cfg["loading_params"]["datasets"][0].update(path="data/rows.jsonl", output_dir="shards")
    cfg["loading_params"]["state_dir"] = "state"
    return cfg


def test_relative_paths_are_resolved_against_the_launcher_directory(tmp_path, monkeypatch):
    launch = tmp_path / "launch"
    (launch / "data").mkdir(parents=True)
    (launch / "data" / "rows.jsonl").write_bytes(GSM8K_JSONL.read_bytes())
    cfg_path = write_config(tmp_path, _relative_config(tmp_path))
    monkeypatch.chdir(launch)
    config = load_config(cfg_path)
    ds = config.datasets[0]
    assert ds.path == str(launch / "data" / "rows.jsonl")
    assert ds.output_dir == str(launch / "shards")
    assert ds.image_base_path == str(launch)
    assert config.processor.metadata_output_path == str(launch / "meta" / "batch_metadata.jsonl")
    assert config.state_dir == str(launch / "state")
    # URIs are kept as they are, absolute paths are normalised, and it is idempotent.
    assert resolve_path("gs://bucket/a/../b") == "gs://bucket/a/../b"
    assert resolve_path("mem://x/y") == "mem://x/y"
    assert resolve_path("/a/./b/../c") == "/a/c"
    assert resolve_path(resolve_path("x/y")) == resolve_path("x/y")


def test_relative_export_path_lands_beside_the_launcher_not_the_worker(tmp_path, monkeypatch):
    """multi_processing workers are other processes; every output is where the launcher
    said, and the export holds every request (2 per row)."""
    launch = tmp_path / "launch"
    (launch / "data").mkdir(parents=True)
    rows = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:300]
    (launch / "data" / "rows.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    cfg = _relative_config(tmp_path, max_requests_per_chunk=40)
    cfg["processing_params"]["outputs"].append(
        {
            "name": "hint",
            "type": "batch_api",
            "output_type": "plain",
            "prompt": "Hint: {{ question }}",
        }
    )
    cfg_path = write_config(tmp_path, cfg)
    monkeypatch.chdir(launch)
    args = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    code = submit_main(
        ["--config", cfg_path, "--run-id", "mp", "--export-prompts", "out/p.jsonl", *args]
    )
    assert code == 0
    lines = (launch / "out" / "p.mp.jsonl").read_text(encoding="utf-8").splitlines()
    ids = sorted(json.loads(x)["request"]["custom_id"] for x in lines)
    assert ids == sorted(f"{o}-text-{i}" for o in ("answer", "hint") for i in range(300))
    placeholders = list((launch / "shards" / "shard_0").glob("placeholders.mp-*.jsonl"))
    assert sum(len(p.read_text().splitlines()) for p in placeholders) == 300
    assert (launch / "meta").is_dir()


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--dry-run"], "--export-prompts"),
        (["--dry_run", "true"], "--dry_run"),
        (["--num-workers", "2"], "--num_workers"),
        (["--direct-num-workers=2"], "--direct_num_workers"),
        (["--export_prompts", "x.jsonl"], "--export-prompts"),
        (["stray-value"], "stray-value"),
    ],
)
def test_flags_beam_would_discard_are_refused_before_anything_is_read(
    tmp_path, capsys, provider_env, flags, named
):
    fake = provider_env
    cfg = write_config(tmp_path, base_config(tmp_path, base_url=fake.openai_base_url))
    assert submit_main(["--config", cfg, *flags]) == 2
    err = capsys.readouterr().err
    assert named in err and "nothing was run" in err
    assert fake.batches() == [] and fake.call_counts().get("files_create", 0) == 0
    assert not (tmp_path / "meta").exists()


def test_options_of_every_runner_are_accepted(tmp_path, capsys):
    cfg = write_config(tmp_path, base_config(tmp_path))
    code = submit_main(
        [
            "--config",
            cfg,
            "--export-prompts",
            str(tmp_path / "p.jsonl"),
            "--dask_client_address=127.0.0.1:1",  # Dask runner (dask not installed)
            "--flink_master=[auto]",
            "--spark_master_url=local[2]",
            "--experiment=a",
            "--experiments=b",
        ]
    )
    assert code == 0, capsys.readouterr().err


def test_local_receipts_are_refused_on_a_runner_whose_workers_do_not_share_the_disk(
    tmp_path, capsys, provider_env
):
    fake = provider_env
    cfg = write_config(tmp_path, base_config(tmp_path, base_url=fake.openai_base_url))
    dataflow = ["--runner=DataflowRunner", "--project=p", "--region=us-central1"]
    assert submit_main(["--config", cfg, *dataflow, "--temp_location=gs://b/t"]) == 2
    err = capsys.readouterr().err
    assert "processors[0].metadata_output_path" in err and "local path" in err
    docker = ["--runner=PortableRunner", "--job_endpoint=localhost:1", "--environment_type=DOCKER"]
    assert submit_main(["--config", cfg, *docker]) == 2
    assert "may not share this machine's disk" in capsys.readouterr().err
    assert fake.batches() == []


def test_mem_paths_are_refused_with_workers_in_other_processes(tmp_path, capsys, provider_env):
    cfg = base_config(tmp_path, base_url=provider_env.openai_base_url)
    cfg["processors"][0]["metadata_output_path"] = "mem://refused/batch_metadata.jsonl"
    path = write_config(tmp_path, cfg)
    mp = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    assert submit_main(["--config", path, *mp]) == 2
    err = capsys.readouterr().err
    assert "mem://" in err and "processors[0].metadata_output_path" in err


def test_an_unwritable_receipts_location_stops_the_run_before_anything_is_sent(
    tmp_path, capsys, provider_env
):
    fake = provider_env
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the receipts folder should be")
    cfg = base_config(tmp_path, base_url=fake.openai_base_url)
    cfg["processors"][0]["metadata_output_path"] = str(blocker / "meta" / "b.jsonl")
    assert submit_main(["--config", write_config(tmp_path, cfg)]) == 2
    err = capsys.readouterr().err
    assert "processors[0].metadata_output_path" in err and "cannot be written" in err
    assert fake.batches() == [] and fake.call_counts().get("files_create", 0) == 0


def test_a_whole_run_and_merge_on_beams_in_memory_filesystem(tmp_path, capsys, provider_env):
    """Every configured path on mem://: nothing may go through open() or os.path."""
    from apache_beam.io.filesystems import FileSystems

    from tests import memfs

    fake = provider_env
    root = f"mem://mmirage-{os.getpid()}-{time.monotonic_ns()}"
    rows = GSM8K_JSONL.read_bytes().splitlines(keepends=True)[:40]
    with FileSystems.create(f"{root}/data/rows.jsonl") as f:
        f.write(b"".join(rows))
    cfg = base_config(tmp_path, base_url=fake.openai_base_url, max_requests_per_chunk=15)
    cfg["processors"][0]["metadata_output_path"] = f"{root}/meta/batch_metadata.jsonl"
    cfg["loading_params"]["datasets"][0].update(
        path=f"{root}/data/rows.jsonl", output_dir=f"{root}/shards"
    )
    cfg["loading_params"]["state_dir"] = f"{root}/state"
    path = write_config(tmp_path, cfg)
    assert submit_main(["--config", path, "--run-id", "mem1"]) == 0, capsys.readouterr()
    assert submit_main(["--config", path, "--export-prompts", f"{root}/export.jsonl"]) == 0
    out = f"{root}/merged.jsonl"
    assert merge_main(["--config", path, "--output-path", out, "--run-id", "mem1"]) == 0
    with FileSystems.open(out) as f:
        merged = [json.loads(x) for x in f.read().decode("utf-8").split("\n") if x]
    assert [m["source_index"] for m in merged] == list(range(40))
    assert all(m["answer"].startswith("FAKE:") for m in merged)
    receipts = FileSystems.match([f"{root}/meta/batch_metadata.text.mem1.jsonl"])[0]
    assert len(receipts.metadata_list) == 1
    exports = FileSystems.match([f"{root}/export.*.jsonl"])[0].metadata_list
    assert len(exports) == 1
    assert len(fake.batches("openai")) == 3
    assert not list(tmp_path.glob("**/batch_metadata*"))  # nothing leaked onto the disk
    left = sorted(memfs.objects(root))
    assert not [k for k in left if ".parts" in k or "tmp" in k], left  # no leftovers


@pytest.mark.parametrize(
    "flags, expected",
    [
        ([], 1),
        (["--sdk_worker_parallelism", "2"], 2),  # portable runners: SDK workers per node
        (["--sdk_worker_parallelism=0"], 1),  # 0: the runner chooses, so no count given
        (["--num_workers=100", "--sdk_worker_parallelism=2"], 100),
        (["--max_num_workers=50", "--num_workers=10"], 50),
        (["--parallelism=8"], 8),
        (["--direct_num_workers=3"], 1),  # in-memory DirectRunner: one worker
        (["--direct_running_mode=multi_processing", "--direct_num_workers=3"], 3),
    ],
)
def test_default_chunking_parallelism_follows_the_worker_count_the_options_give(flags, expected):
    from apache_beam.options.pipeline_options import PipelineOptions

    from mmirage_beam.transforms.submit_rows import default_chunking_parallelism

    assert default_chunking_parallelism(PipelineOptions(flags)) == expected
    assert default_chunking_parallelism(None) == 1


def test_chunking_parallelism_spreads_requests_over_independent_chunkers(tmp_path, capsys):
    cfg = base_config(tmp_path, max_requests_per_chunk=100, max_chunk_bytes=40_000)
    cfg["execution_params"]["chunking_parallelism"] = 3
    path = write_config(tmp_path, cfg)
    assert (
        submit_main(
            ["--config", path, "--export-prompts", str(tmp_path / "p.jsonl"), "--run-id", "cp"]
        )
        == 0
    )
    lines = [json.loads(x) for x in (tmp_path / "p.cp.jsonl").read_text().splitlines()]
    by_chunk = collections.defaultdict(list)
    for line in lines:
        by_chunk[line["batch_id"]].append(line["request"])
    shards = {b.split("-")[2] for b in by_chunk}
    assert shards == {"s000", "s001", "s002"}
    ids = [r["custom_id"] for reqs in by_chunk.values() for r in reqs]
    assert sorted(ids) == sorted(f"answer-text-{i}" for i in range(1319))  # exactly once each
    for reqs in by_chunk.values():
        assert len(reqs) <= 100
        size = sum(len(json.dumps(r, ensure_ascii=False, separators=(",", ":"))) + 1 for r in reqs)
        assert size <= 40_000
    receipts = (tmp_path / "meta").glob("batch_metadata.dry-run.text.cp.jsonl")
    assert len(next(receipts).read_text().splitlines()) == len(by_chunk)
    bad = base_config(tmp_path)
    bad["execution_params"]["chunking_parallelism"] = 0
    assert submit_main(["--config", write_config(tmp_path, bad, "bad.yaml")]) == 2
    assert "execution_params.chunking_parallelism" in capsys.readouterr().err


def test_the_stateful_chunk_step_is_not_fused_with_reading_and_rendering(tmp_path):
    """Beam's FnApiRunner (the DirectRunner, multi_processing, the Python job service) runs
    a stage that holds a stateful step on one worker: reading, rendering and staging must
    not share the stateful chunk step's stage, or a 2-worker job uses one."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    from mmirage_beam.transforms.submit_rows import build_submit_pipeline

    config = load_config(write_config(tmp_path, base_config(tmp_path)))
    p = beam.Pipeline(options=PipelineOptions(["--sdk_worker_parallelism=2"]))
    build_submit_pipeline(p, config, "fuse", export_prompts=str(tmp_path / "p.jsonl"))
    _, stages = fn_runner.FnApiRunner().create_stages(p.to_runner_api())
    stateful = [s for s in stages if s.is_stateful()]
    assert any("ChunkPerKey" in t.unique_name for s in stateful for t in s.transforms)
    for stage in stateful:
        names = " ".join(t.unique_name for t in stage.transforms)
        for heavy in ("ReadRows", "BuildRequests", "StageChunks", "PlaceholderRows"):
            assert heavy not in names, f"{heavy} is fused with a stateful step: {names}"


STOP_ROWS = 160


def _submitted(fake) -> collections.Counter:
    return collections.Counter(r["custom_id"] for r in fake.submitted_requests())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_stop_lets_calls_in_flight_finish_and_the_resume_sends_nothing_twice(
    tmp_path, provider_env, sig, provider
):
    fake = provider_env
    url = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
    cfg = base_config(tmp_path, provider, base_url=url, max_requests_per_chunk=4)
    # 160 rows, 40 chunks: enough calls in flight to stop among them (the whole GSM8K
    # test split made the resume submit 327 batches, a minute of CI for no more cover)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(GSM8K_JSONL.read_text(encoding="utf-8").splitlines(True)[:STOP_ROWS]))
    cfg["loading_params"]["datasets"][0]["path"] = str(rows)
    path = write_config(tmp_path, cfg)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "pipelines.submit", "--config", path, "--run-id", "stop1"]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    parts = tmp_path / "meta" / "batch_metadata.text.stop1.jsonl.parts"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(parts.glob("*.json"))) < 3:
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    assert "Every accepted batch has its receipt" in err
    receipts_file = tmp_path / "meta" / "batch_metadata.text.stop1.jsonl"
    receipts = [json.loads(x) for x in receipts_file.read_text().splitlines()]
    created = len(fake.batches(provider))
    assert 3 <= created == len(receipts) < STOP_ROWS // 4  # stopped early, none unrecorded
    assert not (tmp_path / "meta" / "batch_metadata.stop.stop1").exists()
    # The printed resume command sends the rest, each request exactly once overall (run
    # in this process: the stop needed a process of its own, the resume does not).
    resume = run_cli_in_process(["run", *cmd[3:]], cwd=tmp_path, env=env)
    assert resume.returncode == 0, resume.stderr
    sent = _submitted(fake)
    assert sorted(sent) == sorted(f"answer-text-{i}" for i in range(STOP_ROWS))
    assert set(sent.values()) == {1}


def test_progress_lines_come_every_interval_while_a_job_runs(monkeypatch, caplog):
    import logging

    from mmirage_beam.progress import counters
    from mmirage_beam.progress.text import progress_line

    monkeypatch.setattr(counters, "INTERVAL_SECS", 0.05)
    monkeypatch.setattr(counters, "_STATE", {"thread": None, "started": 0.0, "active": False})
    monkeypatch.delenv(counters.INTERVAL_ENV, raising=False)
    caplog.set_level(logging.INFO, logger="mmirage_beam.progress")
    counters.add("rows read", 3)
    counters.add("requests built", 6)
    time.sleep(0.3)
    lines = [r.getMessage() for r in caplog.records if r.name == "mmirage_beam.progress"]
    assert len(lines) >= 2  # repeated even though nothing changed
    assert "rows read 3; requests built 6" in lines[-1]
    counters.finish()
    time.sleep(0.15)
    n = len([r for r in caplog.records if r.name == "mmirage_beam.progress"])
    time.sleep(0.2)
    assert len([r for r in caplog.records if r.name == "mmirage_beam.progress"]) == n
    assert progress_line({"rows read": 132000}, 20.4) == ("progress after 20 s: rows read 132,000")
