"""``engines.cluster.start_cluster``, the one start of Flink's and Spark's clusters, on an
engine of small Python processes (no JVM, a second): the master, each worker with its
own variables, the wait for registration, the job server on a free port, the saved
flags; and a worker that dies takes the whole start down, every process stopped.

The real engines run on it in ``test_engines.py`` (Flink) and ``test_spark.py``.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from mmirage_beam.engines.cluster import (
    ClusterState,
    Engine,
    Env,
    portable_flags,
    start_cluster,
    stop_cluster,
)
from mmirage_beam.engines.processes import Daemon, EngineError, start_daemon
from mmirage_beam.engines.provision import Say

#: A worker: writes ``<cwd>/registered`` with its MARK variable, then waits to be stopped;
#: with EXIT_AT_ONCE set it exits first instead (a worker that died).
_WORKER = textwrap.dedent(
    """
    import os, sys, time
    if os.environ.get("EXIT_AT_ONCE"):
        sys.exit(3)
    with open("registered.tmp", "w") as f:
        f.write(os.environ.get("MARK", ""))
    os.replace("registered.tmp", "registered")
    time.sleep(600)
    """
)
#: Beam's job server as far as start_job_server reads it: listens, then logs so.
_JOB_SERVER = textwrap.dedent(
    """
    import socket, sys, time
    port = int(sys.argv[1])
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen()
    print(f"JobService started on localhost:{port}", flush=True)
    time.sleep(600)
    """
)


class _Fake(Engine):
    name = "fake"
    roles = ("worker", "master")
    java_releases = "any"
    releases = ("1.0", "2.0")

    def __init__(self) -> None:
        self.calls: list[str] = []

    def provision(self, say: Say) -> None:
        self.calls.append("provision")

    def prepare(self, cluster_dir: Path, workers: int, per_worker: int) -> dict[str, int]:
        self.calls.append(f"prepare {workers}x{per_worker}")
        return {"job": 0}

    def _python(self, state: ClusterState, name: str, code: str, env: Env, *args: str) -> Daemon:
        d = Path(state.dir)
        return start_daemon(
            name, [sys.executable, "-c", code, *args], d / name, d / "logs" / f"{name}.log", env
        )

    def launch_master(self, state: ClusterState, env: Env, deadline: float, say: Say) -> None:
        say("starting the master")
        state.daemons.append(self._python(state, "master", "import time; time.sleep(600)", env))
        state.save()

    def launch_worker(self, state: ClusterState, index: int, per_worker: int, env: Env) -> Daemon:
        return self._python(state, f"worker-{index}", _WORKER, env)

    def count_registered(self, state: ClusterState) -> int:
        return len(list(Path(state.dir).glob("worker-*/registered")))

    def launch_job_server(self, state: ClusterState, env: Env, port: int) -> Daemon:
        return self._python(state, "job-server", _JOB_SERVER, env, str(port))

    def flags(self, job_port: int, boot: Path, workers: int, per_worker: int) -> list[str]:
        return [*portable_flags(job_port, boot), "--workers", str(workers)]


def _env(**extra: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", ""), "JAVA_HOME": "/no/java/needed", **extra}


def test_start_cluster_starts_master_workers_and_job_server_and_saves_the_flags(tmp_path):
    engine, said = _Fake(), []
    state = start_cluster(
        tmp_path / "c", engine, 2, 3, [{"MARK": "first"}], _env(MARK="all"), 60.0, said.append
    )
    try:
        names = [d.name for d in state.daemons]
        assert names == ["master", "worker-1", "worker-2", "job-server"]
        assert all(d.alive() for d in state.daemons)
        assert engine.calls == ["provision", "prepare 2x3"]
        assert said == [
            "starting the master",
            "waiting for 2 worker(s) to register",
            "starting Beam's Fake job server",
        ]
        marks = [(tmp_path / "c" / f"worker-{i}" / "registered").read_text() for i in (1, 2)]
        assert marks == ["first", "all"]  # worker 1's own variable over everyone's
        job = state.ports["job"]
        boot = tmp_path.resolve() / "c" / "sdk-boot.sh"
        assert state.flags == [*portable_flags(job, boot), "--workers", "2"]
        saved = json.loads((tmp_path / "c" / "cluster.json").read_text())
        assert saved["flags"] == state.flags and saved["ports"] == {"job": job}
        assert saved["versions"]["fake"] == "1.0" and saved["versions"]["beam_job_server"] == "2.0"
    finally:
        stopped = stop_cluster(tmp_path / "c")
    assert stopped == ["job-server", "worker-2", "worker-1", "master"]


def test_a_worker_that_dies_stops_everything_started(tmp_path):
    with pytest.raises(EngineError, match="worker-2 exited while waiting for 2 workers"):
        start_cluster(
            tmp_path / "c", _Fake(), 2, 1, [{}, {"EXIT_AT_ONCE": "1"}], _env(), 60.0, print
        )
    state = ClusterState.load(tmp_path / "c")
    assert [d.name for d in state.daemons] == ["master", "worker-1", "worker-2"]
    assert not any(d.alive() for d in state.daemons)


def test_no_java_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(EngineError, match="Fake needs Java any: no JAVA_HOME and no java"):
        start_cluster(tmp_path / "c", _Fake(), 1, 1, [], {"PATH": str(tmp_path)}, 60.0, print)
    assert not (tmp_path / "c" / "cluster.json").exists()
