"""The same run, byte for byte, on real engines: a Flink cluster (a JobManager and two
TaskManagers, separate JVMs, with Beam's Flink job server, started by
``mmirage_beam.engines.flink`` as ``mmirage cluster up`` starts it) and Prism, Beam's Go
runner.

- The lifecycle (dry run, submission, ``check``, ``merge``) gives the DirectRunner's
  merged, errors, invalid-rows and export files and the same receipts, and the fake
  sees each custom_id created once (``tests/lifecycle.py`` asserts it).
- Both TaskManagers' SDK workers built requests and submitted chunks: the ``tracer``
  provider records each step's folder, and each TaskManager's workers run in its own.
- With the receipts, staged chunks and outputs on S3 (moto's server:
  ``test_engines_s3.py``, on a cluster of its own so both files run at once), the whole
  lifecycle on Flink (resubmit and cancel included) gives the local disk's bytes; a burst
  of ``503 SlowDown`` and slow writes while the TaskManagers' workers publish receipts
  loses and repeats nothing (``tests/storage_lifecycle.py``, ``tests/engines/test_s3_storage.py``).
- ``mmirage run --wait`` with every pipeline on Flink and its state on ``gs://`` (a GCS
  emulator) ends as the same command on the local disk on the DirectRunner.
- A TaskManager killed (``kill -9`` of its process group: the JVM and its SDK workers)
  in the middle of a submission, just after the provider accepted a batch: nothing is
  created twice, nothing is lost, the error is one line with the resume command, and
  the resume finishes the run. The kill is a crash point the module's cluster carries
  disarmed (``tests/engines/conftest.py``: ``armed``), so the test needs no cluster of
  its own.

CI runs the S3 lifecycle, both TaskManagers' work, the TaskManager kill at
``batch_created`` and Prism; ``MMIRAGE_ENGINE_CAMPAIGN=1`` runs the rest too (the local
lifecycle, the S3 faults, ``run --wait`` on GCS, more kill steps).

The engines are fetched into the engine cache on first use (``mmirage cluster fetch``;
``.ci/run`` does it first). Without Java, Maven or Go the tests skip, unless
``MMIRAGE_REQUIRE_PORTABLE=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import collections
import json
import os
import shlex
import time
from pathlib import Path

import pytest
import yaml

from mmirage_beam.engines.cluster import stop_cluster
from mmirage_beam.engines.processes import pid_alive, wait_until
from mmirage_beam.testing import FakeProviderServer
from tests import storage_lifecycle as storage
from tests.conftest import GSM8K_JSONL
from tests.engines.conftest import (
    CAMPAIGN,
    armed,
    campaign,
    engine_worker_env,
    start_engine_or_skip,
)
from tests.lifecycle import (
    CONFIG,
    LAUNCHER_KEY,
    N_ROWS,
    PLUGIN_SITE,
    TRACER_LAUNCHER_KEY,
    TRACER_WORKER_KEY,
    launcher_dir,
    lifecycle,
    read_jsonl,
    sha,
)
from tests.runners import REQUIRE_ENV_VAR, clean_env, run_cli

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The lifecycle on the in-memory DirectRunner, in this process."""
    root = launcher_dir(tmp_path_factory.mktemp("direct") / "launch")
    return lifecycle(root, [], in_process=True)


def _compare(got: dict, reference: dict, engine: str) -> None:
    print(f"{engine}: {got['timings']}")
    for what in ("export", "merged", "errors", "invalid_rows", "receipts"):
        assert got[what] == reference[what], f"{engine}: {what} differs from the DirectRunner's"


@campaign
def test_flink_gives_the_directrunner_files(flink, reference, tmp_path):
    got = lifecycle(
        launcher_dir(tmp_path / "launch"),
        flink.flags,
        quiet_dirs=[Path(flink.dir) / "jobmanager", Path(flink.dir) / "job-server"],
    )
    _compare(got, reference, "flink")


def test_both_taskmanagers_built_and_submitted(flink, engine_root, tmp_path):
    """The tracer provider records the folder of every step: building and submitting
    ran in the SDK workers of both TaskManagers (each in its TaskManager's folder, with
    the key of the TaskManagers' environment), never in the launcher; and every worker had
    imported the package at start-up (``--beam_plugins``, tests/unit/test_worker_imports.py)."""
    trace_file = engine_root / "trace.jsonl"
    trace_file.unlink(missing_ok=True)
    root = launcher_dir(tmp_path / "launch", provider="tracer")
    with FakeProviderServer() as fake:
        env = clean_env(
            {
                "TRACER_API_KEY": TRACER_LAUNCHER_KEY,
                "MMIRAGE_TRACER_BASE_URL": fake.openai_base_url,
                "MMIRAGE_TRACE_FILE": str(trace_file),
            },
            pythonpath=[PLUGIN_SITE],
        )
        run = run_cli(
            ["run", "--config", "config.yaml", "--skip-invalid-rows", *flink.flags], root, env
        )
        assert run.returncode == 0, run.stderr[-4000:]
        n_batches = len(fake.batches("openai"))
        assert set(fake.create_counts().values()) == {1}
    traces = read_jsonl(trace_file)
    tm_dirs = {str(Path(flink.dir) / f"taskmanager-{i}") for i in (1, 2)}
    on_tms = [t for t in traces if t["cwd"] in tm_dirs]
    for stage in ("build_request", "submit_chunk_lines"):
        by_tm = collections.Counter(t["cwd"] for t in on_tms if t["stage"] == stage)
        print(f"{stage} per TaskManager: {dict(by_tm)}")
        assert set(by_tm) == tm_dirs, f"{stage} ran on {dict(by_tm)}, not on both TaskManagers"
    assert all(t["worker_imports"] for t in on_tms), "a worker skipped the start-up imports"
    stages = [t["stage"] for t in on_tms]
    assert stages.count("build_request") >= 2 * (N_ROWS - 1)
    assert stages.count("submit_chunk_lines") == n_batches
    assert not any(
        t["stage"] in ("build_request", "submit_chunk_lines") for t in traces if t not in on_tms
    )
    assert {t["key_sha256"] for t in on_tms if t["stage"] != "build_request"} == {
        sha(TRACER_WORKER_KEY)
    }
    tm_pids = {flink.daemon(f"taskmanager-{i}").pid for i in (1, 2)}
    assert {t["ppid"] for t in on_tms} <= tm_pids | {t["pid"] for t in on_tms}


@campaign
def test_run_wait_on_flink_with_its_state_on_gcs(engine_root, gcs, rows_file, tmp_path):
    """``mmirage run --wait`` (submit, wait, merge, re-send the retryable failure, merge
    again) with every pipeline on a Flink cluster of 2 TaskManagers and the receipts,
    staged chunks, placeholder rows and merged files on ``gs://`` (the GCS emulator,
    through Beam's GCS filesystem: its endpoint and offline credentials are in the
    TaskManagers' environment) ends as the same command on the local disk on the
    DirectRunner: the same exit status, merged and errors files, and the same requests
    at the fake (each custom_id once; the flaky one once more, in the resubmission)."""
    from mmirage_beam.engines.flink import start_flink

    got: dict = {}
    cluster = None
    try:
        for where in ("local", "gcs"):
            store = str(tmp_path / "store") if where == "local" else gcs.uri("wait")
            root = storage.launcher(tmp_path / where, rows_file, store)
            flags: list[str] = []
            if where == "gcs":
                env = {**engine_worker_env(engine_root), **gcs.env}
                cluster = start_engine_or_skip(
                    start_flink, tmp_path / "flink", taskmanagers=2, env=env
                )
                flags = cluster.flags
            with FakeProviderServer() as fake:
                env = clean_env(
                    {
                        "OPENAI_API_KEY": LAUNCHER_KEY,
                        "MMIRAGE_OPENAI_BASE_URL": fake.openai_base_url,
                        **gcs.env,
                    }
                )
                args = ["run", "--config", "config.yaml", "--run-id", "w", "--skip-invalid-rows",
                        "--wait", "--retries", "1", "--poll-interval", "0.2", "--output-path",
                        f"{store}/out/merged.jsonl", *flags]  # fmt: skip
                start = time.monotonic()
                proc = run_cli(args, root, env, timeout=900)
                print(f"{where}: exit {proc.returncode} in {time.monotonic() - start:.0f} s")
                assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
                read = (
                    (lambda rel, store=store: Path(store, rel).read_bytes())
                    if where == "local"
                    else (lambda rel: gcs.read(f"wait/{rel}"))
                )
                got[where] = {
                    "exit": proc.returncode,
                    "merged": read("out/merged.jsonl"),
                    "errors": read("out/merged.errors.jsonl"),
                    "sent": collections.Counter(r["custom_id"] for r in fake.submitted_requests()),
                    "creates": collections.Counter(fake.create_counts().values()),
                }
    finally:
        if cluster is not None:
            stop_cluster(Path(cluster.dir))
    assert got["gcs"] == got["local"]
    sent = got["local"]["sent"]
    assert sent.pop("answer-text-3") == 2, "the flaky row: once, then once in the resubmission"
    assert sorted(sent) == sorted(f"answer-text-{i}" for i in storage.VALID if i != 3) and set(
        sent.values()
    ) == {1}
    assert not [k for k in gcs.keys("wait/") if ".parts/" in k or ".staged." in k]


def _many_chunks_dir(root: Path, provider: str, rows: int = 120) -> Path:
    """A launcher folder whose run is 60 batches of 2 requests (one output), so a
    submission is far from done when the first receipts appear."""
    root.mkdir(parents=True)
    lines = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:rows]
    (root / "rows.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = json.loads(json.dumps(CONFIG))
    proc = cfg["processors"][0]
    proc["max_requests_per_chunk"] = 2
    proc["provider"] = provider
    proc["base_url"] = proc["base_url"].replace("OPENAI", provider.upper())
    cfg["loading_params"]["datasets"][0]["path"] = "rows.jsonl"
    cfg["processing_params"]["outputs"] = cfg["processing_params"]["outputs"][:1]
    cfg["processing_params"]["output_schema"] = {"answer": "{{ answer }}"}
    (root / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return root


#: (provider, step) of the TaskManager-kill test. CI runs the first; the rest run with
#: MMIRAGE_ENGINE_CAMPAIGN=1 (benchmarks/crash_suite.py runs more, with trials).
KILLS = [("openai", "batch_created")]
if CAMPAIGN:
    KILLS += [
        ("anthropic", "batch_created"),
        ("openai", "intent_written"),
        ("anthropic", "receipt_written"),
    ]


@pytest.mark.parametrize(("provider", "step"), KILLS)
def test_a_taskmanager_killed_mid_submission_loses_and_repeats_nothing(
    provider, step, flink, engine_root, tmp_path
):
    """The first SDK worker to reach ``step`` (``batch_created``: the provider accepted
    a batch whose receipt is not written yet) kills its whole process group: its
    TaskManager JVM and every SDK worker of that TaskManager (``MMIRAGE_CRASH_KILL=
    group``; the module's cluster carries the crash point, armed here). The job fails
    with one line and the resume command; a TaskManager is started in the dead one's
    place, as a supervisor would; the resume finishes the run. Every request is created
    exactly once, none is lost or unsent."""
    from mmirage_beam.engines.flink import registered_taskmanagers, start_taskmanager

    root = _many_chunks_dir(tmp_path / "launch", provider)
    rows = 120
    run_id = f"tmkill-{provider}-{step}".replace("_", "-")
    with FakeProviderServer() as fake:
        base = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
        env = clean_env(
            {
                f"{provider.upper()}_API_KEY": LAUNCHER_KEY,
                f"MMIRAGE_{provider.upper()}_BASE_URL": base,
            }
        )
        with armed(engine_root, step) as crashed:
            args = ["run", "--config", "config.yaml", "--run-id", run_id, *flink.flags]
            first = run_cli(args, root, env, timeout=600)
            died = [d for d in flink.daemons if not d.alive()]
            print(f"run exit {first.returncode}; dead: {[d.name for d in died]}")
            print(first.stderr[-2500:])
            assert crashed.exists(), "no worker reached the step"
        assert [d.name for d in died] in (["taskmanager-1"], ["taskmanager-2"])
        index = int(died[0].name.rsplit("-", 1)[1])
        flink.daemons[flink.daemons.index(died[0])] = start_taskmanager(flink, index, flink.env)
        flink.save()
        wait_until(
            "the replacement TaskManager",
            lambda: True if registered_taskmanagers(flink) == 2 else None,
            time.monotonic() + 120,
        )
        if first.returncode != 0:
            assert "Traceback" not in first.stderr, first.stderr[-3000:]
            lines = first.stderr.splitlines()
            assert any(ln.startswith("mmirage: error:") for ln in lines), first.stderr
            at = lines.index("Resume the run with:")
            resume = shlex.split(lines[at + 1])
            assert resume[:2] == ["mmirage", "run"] and run_id in resume, resume
            again = run_cli(resume[1:], root, env, timeout=600)
            assert again.returncode == 0, again.stderr[-3000:]
        sent = collections.Counter(r["custom_id"] for r in fake.submitted_requests())
        creates = fake.create_counts()
    assert sorted(sent) == sorted(f"answer-text-{i}" for i in range(rows)), "lost requests"
    assert set(sent.values()) == {1}, "a request was sent twice"
    assert set(creates.values()) == {1}, "a custom_id was created twice"
    receipts = read_jsonl(root / "meta" / f"batch_metadata.text.{run_id}.jsonl")
    assert sum(len(r["custom_id_to_source_index"]) for r in receipts) == rows


def test_prism_gives_the_directrunner_files(engine_root, reference, tmp_path):
    """``mmirage cluster up --engine prism``'s service and flags: the same files."""
    from mmirage_beam.engines.prism import start_prism

    state = start_engine_or_skip(
        start_prism, engine_root / "prism", env=engine_worker_env(engine_root)
    )
    try:
        got = lifecycle(launcher_dir(tmp_path / "launch"), state.flags)
    finally:
        stop_cluster(Path(state.dir))
    _compare(got, reference, "prism")


def test_cluster_up_prints_the_flags_last_and_down_stops_it(tmp_path):
    """The CLI as the README uses it: ``FLAGS=$(mmirage cluster up ... | tail -1)``; a
    second ``up`` in the same folder is refused; ``down`` stops every process."""
    cluster = tmp_path / "c"
    env = clean_env()
    up = run_cli(["cluster", "up", "--engine", "prism", "--dir", str(cluster)], tmp_path, env)
    if up.returncode != 0 and os.environ.get(REQUIRE_ENV_VAR) != "1":
        pytest.skip(f"Prism cannot be built or started here: {up.stderr[-2000:]}")
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        flags = up.stdout.strip().splitlines()[-1].split()
        assert flags[:2] == ["--runner", "PortableRunner"] and "--job_endpoint" in flags
        again = run_cli(
            ["cluster", "up", "--engine", "prism", "--dir", str(cluster)], tmp_path, env
        )
        assert again.returncode == 1 and "already running" in again.stderr, again.stderr
        status = run_cli(["cluster", "status", "--dir", str(cluster)], tmp_path, env)
        assert status.returncode == 0 and "running" in status.stdout, status.stdout
    finally:
        down = run_cli(["cluster", "down", "--dir", str(cluster)], tmp_path, env)
    assert down.returncode == 0 and "stopped: prism" in down.stdout, down.stdout + down.stderr
    status = run_cli(["cluster", "status", "--dir", str(cluster)], tmp_path, env)
    assert status.returncode == 1 and "stopped" in status.stdout
    pid = json.loads((cluster / "cluster.json").read_text())["daemons"][0]["pid"]
    assert not pid_alive(pid)


def test_ctrl_c_during_cluster_up_stops_what_it_started_in_one_line(tmp_path):
    """SIGINT while ``mmirage cluster up`` waits for its TaskManagers: exit 130, one
    line (no traceback), and no process of the cluster left."""
    import signal
    import subprocess
    import sys

    cluster = tmp_path / "c"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "cluster", "up", "--dir", str(cluster)],
        cwd=tmp_path,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    for line in proc.stderr:  # progress goes to stderr, line by line
        lines.append(line)
        if "waiting for" in line:
            break
    else:
        out, err = proc.communicate(timeout=60)
        if os.environ.get(REQUIRE_ENV_VAR) != "1":
            pytest.skip(f"Flink cannot be started here: {''.join(lines)}{err[-2000:]}")
        raise AssertionError("".join(lines) + err)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and out == "", err
    assert err.strip().splitlines()[-1] == (
        "mmirage cluster up: interrupted; every process it had started is stopped"
    )
    pids = [d["pid"] for d in json.loads((cluster / "cluster.json").read_text())["daemons"]]
    assert pids and not any(pid_alive(pid) for pid in pids)


def test_cluster_up_refuses_no_taskmanagers_as_bad_usage(tmp_path):
    """``--taskmanagers 0`` is bad usage (exit 2, argparse's message), nothing started."""
    up = run_cli(
        ["cluster", "up", "--dir", str(tmp_path / "c"), "--taskmanagers", "0"],
        tmp_path,
        clean_env(),
    )
    assert up.returncode == 2 and "must be at least 1" in up.stderr, up.stderr
    assert not (tmp_path / "c").exists()
