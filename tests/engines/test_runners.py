"""The same run, byte for byte, on every runner whose workers are other processes.

Each runner of the matrix (tests/runners.py: DirectRunner in memory; DirectRunner in
``multi_processing`` mode with 2 workers; the PortableRunner against Beam's own job
service with an EXTERNAL worker pool started in another folder; the PortableRunner with
LOOPBACK workers) runs the whole lifecycle as a user would, with ``mmirage`` in a
subprocess (the in-memory DirectRunner's reference: in the test process, in the same
folder and environment) whose working directory holds a config with RELATIVE paths: a dry run
(``--export-prompts``), the submission to a fresh embedded fake provider, ``mmirage
check`` and ``mmirage merge``. Every runner must leave every receipt where ``mmirage
check`` finds it, and produce byte-identical merged, errors, invalid-rows and export
files and the same receipts as the in-memory DirectRunner.

The provider keys the workers use are the worker pool's (its environment), never the
launcher's: the two are different here, and a pool without a key stops the run before
anything is submitted.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from mmirage_beam.testing import FakeProviderServer
from tests.conftest import GSM8K_JSONL
from tests.lifecycle import (
    CONFIG,
    LAUNCHER_KEY,
    N_ROWS,
    PLUGIN_SITE,
    TRACER_LAUNCHER_KEY,
    TRACER_WORKER_KEY,
    WORKER_KEY,
    launcher_dir,
    lifecycle,
    read_jsonl,
    sha,
)
from tests.runners import (
    PORTABLE_RUNNERS,
    RUNNERS,
    PortableServices,
    ServiceStartError,
    clean_env,
    run_cli,
    runner_flags,
    start_or_skip,
    worker_env,
)


def _start_or_skip(services: PortableServices) -> PortableServices:
    """Start the services; skip the test (fail with $MMIRAGE_REQUIRE_PORTABLE=1) when
    Beam's job service or worker pool cannot start on this machine."""
    what = "Beam's portable job service or worker pool"
    start_or_skip(services.start, (ServiceStartError,), what)
    return services


@pytest.fixture(scope="module")
def beam_services(tmp_path_factory):
    """Beam's job service and an EXTERNAL worker pool, each in its own empty folder, for
    the module. The pool holds the workers' keys: OPENAI_API_KEY (not the launcher's) and
    TRACER_API_KEY_FILE; the tracer plugin's folder is on its PYTHONPATH."""
    root = tmp_path_factory.mktemp("beam")
    secrets = root / "secrets"
    secrets.mkdir()
    (secrets / "tracer_key").write_text(TRACER_WORKER_KEY + "\n", encoding="utf-8")
    env = worker_env(
        {
            "OPENAI_API_KEY": WORKER_KEY,
            "TRACER_API_KEY_FILE": str(secrets / "tracer_key"),
            "MMIRAGE_TRACE_FILE": str(root / "trace.jsonl"),
        },
        pythonpath=[PLUGIN_SITE],
    )
    services = _start_or_skip(PortableServices(root / "services", env))
    services.trace_file = root / "trace.jsonl"
    yield services
    leftovers = services.stop()
    assert leftovers == [], f"processes of the Beam services not reaped: {leftovers}"
    assert services.job.proc.poll() is not None and services.pool.proc.poll() is not None


def _services_for(runner: str, request) -> PortableServices | None:  # noqa: ANN001
    return request.getfixturevalue("beam_services") if runner in PORTABLE_RUNNERS else None


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The lifecycle on the in-memory DirectRunner (in this process): what every other
    runner, each through ``mmirage`` subprocesses, must match."""
    return lifecycle(
        launcher_dir(tmp_path_factory.mktemp("direct") / "launch"), [], in_process=True
    )


@pytest.mark.parametrize("runner", RUNNERS)
def test_every_runner_gives_the_same_files(runner, reference, tmp_path, request):
    if runner == "direct":
        got = reference
    else:
        services = _services_for(runner, request)
        got = lifecycle(
            launcher_dir(tmp_path / "launch"),
            runner_flags(runner, services),
            quiet_dirs=[services.pool.cwd, services.job.cwd] if services else [],
        )
    print(f"{runner}: {got['timings']}")
    for what in ("export", "merged", "errors", "invalid_rows", "receipts"):
        assert got[what] == reference[what], f"{runner}: {what} differs from the DirectRunner's"


def _traces(path: Path) -> list[dict]:
    return read_jsonl(path) if path.exists() else []


def test_dofns_run_in_worker_processes_in_another_folder(beam_services, tmp_path):
    """Provider ``tracer`` (tests/plugins/site: found only through its entry point, in the
    launcher and on the workers) records the pid, parent and folder of every step: building
    and submitting happen in the pool's SDK worker processes, in the pool's folder, with
    the key the pool was given (TRACER_API_KEY_FILE), not the launcher's."""
    services = beam_services
    root = launcher_dir(tmp_path / "launch", provider="tracer")
    flags = runner_flags("portable_external", services)
    trace_file = services.trace_file
    trace_file.unlink(missing_ok=True)
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
            ["run", "--config", "config.yaml", "--run-id", "trace1", "--skip-invalid-rows", *flags],
            root,
            env,
        )
        assert run.returncode == 0, run.stderr[-4000:]
        merge = run_cli(
            ["merge", "--config", "config.yaml", "--output-path", "out/merged.jsonl", *flags],
            root,
            env,
        )
        assert merge.returncode == 1, merge.stdout + merge.stderr[-4000:]
        n_batches = len(fake.batches("openai"))
        assert n_batches >= 8
    assert len(read_jsonl(root / "out" / "merged.jsonl")) == N_ROWS
    traces = _traces(trace_file)
    pool_cwd = str(services.pool.cwd)
    on_workers = [t for t in traces if t["cwd"] == pool_cwd]
    in_launcher = [t for t in traces if t["cwd"] == str(root)]
    assert len(on_workers) + len(in_launcher) == len(traces), traces
    worker_pids = {t["pid"] for t in on_workers}
    print(
        f"pytest pid {os.getpid()}; pool pid {services.pool.proc.pid} in {pool_cwd}; "
        f"launcher in {root}; worker pids {sorted(worker_pids)}"
    )
    for t in on_workers[:3] + [t for t in on_workers if t["stage"] != "build_request"][:6]:
        print("worker trace:", json.dumps(t))
    for t in in_launcher[:2]:
        print("launcher trace:", json.dumps(t))
    for line in services.pool.log_text().splitlines():
        if "Starting worker" in line:
            print("pool log:", line)
    # Building (2 per valid row) and submitting (one per batch) ran only on the workers,
    # children of the pool, never in the launcher or in this process.
    stages = [t["stage"] for t in on_workers]
    assert stages.count("build_request") >= 2 * (N_ROWS - 1)
    assert stages.count("submit_chunk_lines") == n_batches
    assert not any(t["stage"] in ("build_request", "submit_chunk_lines") for t in in_launcher)
    assert {t["ppid"] for t in on_workers} == {services.pool.proc.pid}
    assert os.getpid() not in worker_pids and services.pool.proc.pid not in worker_pids
    # The workers' clients used the pool's key (from its *_API_KEY_FILE); the launcher's
    # (check before merging) used its own.
    assert {t["key_sha256"] for t in on_workers if t["stage"] != "build_request"} == {
        sha(TRACER_WORKER_KEY)
    }
    assert {t["key_sha256"] for t in in_launcher if t["stage"] == "setup"} == {
        sha(TRACER_LAUNCHER_KEY)
    }


def test_worker_without_the_key_stops_the_run_before_submitting(tmp_path):
    """The launcher has OPENAI_API_KEY, the worker pool does not: the run fails on the
    workers before any chunk is submitted, naming the variable."""
    root = launcher_dir(tmp_path / "launch")
    services = _start_or_skip(PortableServices(tmp_path / "services", worker_env()))
    with services, FakeProviderServer() as fake:
        env = clean_env(
            {"OPENAI_API_KEY": LAUNCHER_KEY, "MMIRAGE_OPENAI_BASE_URL": fake.openai_base_url}
        )
        flags = runner_flags("portable_external", services)
        run = run_cli(["run", "--config", "config.yaml", "--run-id", "nokey", *flags], root, env)
        counts = fake.call_counts()
        assert fake.batches() == [] and fake.submitted_requests() == []
        leftovers = services.stop()
    assert leftovers == []
    assert services.job.proc.poll() is not None and services.pool.proc.poll() is not None
    assert run.returncode != 0, run.stdout
    error = [ln for ln in run.stderr.splitlines() if ln.startswith("mmirage: error:")]
    assert error and "needs OPENAI_API_KEY" in error[-1], run.stderr[-3000:]
    assert "No batch had been accepted." in run.stderr
    assert counts.get("files_create", 0) == 0 and counts.get("batches_create", 0) == 0, counts
    assert not list((root / "meta").glob("batch_metadata.text.*"))


def test_plugin_registered_only_in_the_launcher_runs_on_workers(beam_services, tmp_path):
    """The MMIRAGE Mistral example is imported in the launcher only ($MMIRAGE_PLUGINS is
    not set on the workers): its adapter class travels pickled in the pipeline and builds
    the same requests on the pool's workers as in memory."""
    exports = {}
    for runner in ("direct", "portable_external"):
        root = launcher_dir(tmp_path / runner, provider="mistral")
        env = clean_env({"MMIRAGE_PLUGINS": "examples.plugins.mistral_example"})
        proc = run_cli(
            [
                "run",
                "--config",
                "config.yaml",
                "--export-prompts",
                "export.jsonl",
                "--run-id",
                "mis",
                "--skip-invalid-rows",
                *runner_flags(runner, beam_services),
            ],
            root,
            env,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        lines = (root / "export.mis.jsonl").read_bytes().splitlines()
        exports[runner] = sorted(lines, key=lambda x: json.loads(x)["request"]["custom_id"])
    assert len(exports["direct"]) == 2 * (N_ROWS - 1)
    req = json.loads(exports["direct"][0])["request"]
    assert req["params"]["model"] == "mistral-small-latest" and "messages" in req["params"]
    assert exports["portable_external"] == exports["direct"]
    assert "MMIRAGE_PLUGINS" not in beam_services.pool_env


def test_sigterm_on_the_portable_runner_stops_the_job_in_the_job_service(beam_services, tmp_path):
    """SIGTERM to the launcher of a PortableRunner job: no batch is created after the
    launcher exits (the job is stopped in the job service, not left running), every
    created batch has its receipt, and the printed resume sends each request once."""
    import collections
    import signal
    import sys

    root = tmp_path / "launch"
    root.mkdir()
    # 60 chunks of 2: the job is far from done when the fifth receipt appears (400 rows,
    # 200 chunks, cost a minute of submitting on the resume for the same check).
    rows = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:120]
    (root / "rows.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    cfg = json.loads(json.dumps(CONFIG))
    cfg["processors"][0]["max_requests_per_chunk"] = 2
    cfg["loading_params"]["datasets"][0]["path"] = "rows.jsonl"
    cfg["processing_params"]["outputs"] = cfg["processing_params"]["outputs"][:1]
    cfg["processing_params"]["output_schema"] = {"answer": "{{ answer }}"}
    (root / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    with FakeProviderServer() as fake:
        env = clean_env(
            {"OPENAI_API_KEY": LAUNCHER_KEY, "MMIRAGE_OPENAI_BASE_URL": fake.openai_base_url}
        )
        flags = runner_flags("portable_external", beam_services)
        cmd = [sys.executable, "-m", "pipelines.cli", "run", "--config", "config.yaml"]
        cmd += ["--run-id", "term1", *flags]
        proc = subprocess.Popen(cmd, cwd=root, env=env, stderr=subprocess.PIPE, text=True)
        parts = root / "meta" / "batch_metadata.text.term1.jsonl.parts"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(list(parts.glob("*.json"))) < 5:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 130, err[-3000:]
        created = len(fake.batches("openai"))
        time.sleep(5)  # a job left running in the job service would go on creating
        assert len(fake.batches("openai")) == created < 60
        receipts = read_jsonl(root / "meta" / "batch_metadata.text.term1.jsonl")
        assert len(receipts) == created
        assert "Every accepted batch has its receipt" in err
        resume = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
        assert resume.returncode == 0, resume.stderr[-3000:]
        sent = collections.Counter(r["custom_id"] for r in fake.submitted_requests())
    assert sorted(sent) == sorted(f"answer-text-{i}" for i in range(120))
    assert set(sent.values()) == {1}
