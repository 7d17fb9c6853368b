"""A real Flink session cluster on this machine, for rehearsing a Flink run.

:func:`start_flink` starts, each as its own process (and process group) in its own
folder under the cluster folder ``D``:

- a JobManager (Flink's ``bin/jobmanager.sh start-foreground``: a
  ``StandaloneSessionClusterEntrypoint`` JVM), in ``D/jobmanager/``;
- N TaskManagers (``bin/taskmanager.sh start-foreground``: ``TaskManagerRunner`` JVMs),
  in ``D/taskmanager-<i>/``, each with ``slots`` task slots;
- Beam's Flink job server (``FlinkJobServerDriver``), in ``D/job-server/``, which
  translates the portable pipeline and submits it to the JobManager's REST endpoint.

The SDK workers run on the TaskManagers: the printed flags use Beam's ``PROCESS``
environment with ``D/sdk-boot.sh`` (:mod:`mmirage_beam.engines.sdk_boot`, run by this
Python), so each TaskManager starts its own workers, in its own folder and with its own
environment. (Beam's ``EXTERNAL`` environment names one address for the whole job; on
one machine every TaskManager would reach the same worker pool on that loopback port.
On separate hosts each TaskManager's ``localhost:50000`` pool is its own, which is what
PROCESS gives here.) Killing a TaskManager's process group kills its workers with it.

Everything listens on 127.0.0.1 only, on free ports. The state (ports, PIDs, flags) is
written to ``D/cluster.json``; :func:`~mmirage_beam.engines.cluster.stop_cluster` stops
every process by PID (SIGTERM, then SIGKILL). Logs stay in ``D/logs/``.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import Mapping, Optional, Sequence

from mmirage_beam.engines import provision, versions
from mmirage_beam.engines.cluster import (
    ClusterState,
    Engine,
    Env,
    java,
    portable_flags,
    start_cluster,
)
from mmirage_beam.engines.processes import (
    Daemon,
    EngineError,
    free_port,
    get_json,
    start_daemon,
)
from mmirage_beam.engines.provision import Say

#: Flink settings of the rehearsal cluster (config.yaml keys). Memory is sized for a
#: laptop: the heavy work runs in the Python SDK workers, outside the JVMs. The network
#: memory must hold the buffers of every shuffle of a Beam batch job in one slot
#: (Flink's default left 91 of the 512 buffers a submit job asked for). Heartbeats are
#: shorter than the default 50 s (a killed TaskManager is noticed at once anyway: its
#: connections fail), not so short that a loaded machine misses them.
#:
#: Metaspace and off-heap memory are raised because every Beam job runs in a new user
#: class loader, whose classes the TaskManager kept in our runs: measured here, each job
#: loads about 5,000 classes (~35 MB of metaspace) and ~70 MB of direct memory (gRPC's
#: Netty pools) that stay. With Flink's defaults (256 MB metaspace, no task off-heap) a
#: TaskManager of a crash campaign died after about 13 jobs (``OutOfMemoryError: Metaspace``, after
#: ``Cannot reserve ... bytes of direct buffer memory``). The raised sizes allow several
#: times as many jobs (managed memory, which Beam's batch sorts use, is cut to 10% to
#: make room); ``mmirage cluster down`` and ``up`` start afresh.
_FLINK_SETTINGS = {
    "jobmanager.rpc.address": "localhost",
    "jobmanager.bind-host": "localhost",
    "jobmanager.memory.process.size": "1024m",
    "taskmanager.bind-host": "localhost",
    "taskmanager.host": "localhost",
    "taskmanager.memory.process.size": "4096m",
    "taskmanager.memory.jvm-metaspace.size": "1536m",
    "taskmanager.memory.task.off-heap.size": "1024m",
    "taskmanager.memory.managed.fraction": "0.1",
    "taskmanager.memory.network.min": "256m",
    "taskmanager.memory.network.max": "256m",
    "rest.address": "localhost",
    "rest.bind-address": "localhost",
    "heartbeat.interval": "5000",
    "heartbeat.timeout": "30000",
    "jobmanager.execution.failover-strategy": "region",
    "slot.request.timeout": "60000",
}


#: JVM options added to every JVM of the cluster (JobManager, TaskManagers, job server),
#: after Flink's defaults: e.g. ``-XX:TieredStopAtLevel=1`` (no C2 compiler), which the
#: test suite sets because its short jobs on 2 cores pay more for compiling than they
#: gain (tests/engines/conftest.py).
JAVA_OPTS_ENV = "MMIRAGE_ENGINE_JAVA_OPTS"


def extra_java_opts() -> list[str]:
    """The options of :data:`JAVA_OPTS_ENV` in the launcher's environment (none if
    unset), split as a shell would."""
    return shlex.split(os.environ.get(JAVA_OPTS_ENV, ""))


def _write_conf(home: Path, conf: Path, settings: Mapping[str, str]) -> None:
    """``conf/config.yaml`` (Flink's defaults' JVM options, then :data:`JAVA_OPTS_ENV`'s,
    and the settings) and the log4j files of Flink's own default conf."""
    import yaml

    conf.mkdir(parents=True, exist_ok=True)
    defaults = yaml.safe_load((home / "conf" / "config.yaml").read_text(encoding="utf-8"))
    java_opts = defaults.get("env", {}).get("java", {}).get("opts", {}).get("all", "")
    java_opts = " ".join(filter(None, [java_opts, shlex.join(extra_java_opts())]))
    body = {"env.java.opts.all": java_opts, **settings}
    (conf / "config.yaml").write_text(yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
    for name in ("log4j-console.properties", "log4j.properties", "log4j-cli.properties"):
        shutil.copy(home / "conf" / name, conf / name)


def runner_flags(job_port: int, boot: Path, parallelism: int) -> list[str]:
    """The Beam options that run a pipeline on the cluster: the portable runner to the
    job server, PROCESS workers started by the TaskManagers, one task per slot."""
    return [*portable_flags(job_port, boot), "--parallelism", str(parallelism)]


def start_flink(
    cluster_dir: Path,
    taskmanagers: int = 2,
    slots: int = 1,
    env: Optional[Mapping[str, str]] = None,
    taskmanager_env: Sequence[Mapping[str, str]] = (),
    timeout: float = 180.0,
    say=lambda _line: None,  # noqa: ANN001
) -> ClusterState:
    """Start a JobManager, ``taskmanagers`` TaskManagers and Beam's Flink job server in
    ``cluster_dir``: :func:`~mmirage_beam.engines.cluster.start_cluster`, which says
    what ``cluster_dir``, ``env``, ``timeout`` and ``say`` are, what it returns and what
    it raises.

    Args:
        taskmanagers: TaskManager JVMs to start (>= 1); the SDK workers inherit their
            TaskManager's environment.
        slots: task slots per TaskManager; the printed ``--parallelism`` is
            ``taskmanagers * slots``.
        taskmanager_env: per TaskManager, variables added to ``env`` for it alone.

    Raises:
        EngineError: ``taskmanagers`` or ``slots`` is below 1, or as ``start_cluster``.
    """
    if taskmanagers < 1 or slots < 1:
        raise EngineError("--taskmanagers and --slots must be at least 1")
    return start_cluster(
        cluster_dir, _Flink(), taskmanagers, slots, taskmanager_env, env, timeout, say
    )


class _Flink(Engine):
    """Flink's JobManager (the master) and TaskManagers (the workers, ``per_worker``
    task slots each), and Beam's Flink job server."""

    name = "flink"
    roles = ("TaskManager", "JobManager")
    java_releases = "11 or 17"
    releases = (versions.FLINK_VERSION, versions.BEAM_JOB_SERVER_VERSION)

    def provision(self, say: Say) -> None:
        provision.flink_home(say=say)
        provision.flink_job_server_classpath(say=say)

    def prepare(self, cluster_dir: Path, workers: int, per_worker: int) -> dict[str, int]:
        ports = {"rest": free_port(), "rpc": free_port(), "job": 0}
        settings = {
            **_FLINK_SETTINGS,
            "jobmanager.rpc.port": str(ports["rpc"]),
            "rest.port": str(ports["rest"]),
            "taskmanager.numberOfTaskSlots": str(per_worker),
            "parallelism.default": str(workers * per_worker),
        }
        _write_conf(provision.flink_home(), cluster_dir / "conf", settings)
        return ports

    def launch_master(self, state: ClusterState, env: Env, deadline: float, say: Say) -> None:
        say(f"starting the JobManager (REST on localhost:{state.ports['rest']})")
        state.daemons.append(start_jobmanager(state, env))
        state.save()

    def launch_worker(self, state: ClusterState, index: int, per_worker: int, env: Env) -> Daemon:
        return start_taskmanager(state, index, env)

    def count_registered(self, state: ClusterState) -> int:
        return registered_taskmanagers(state)

    def launch_job_server(self, state: ClusterState, env: Env, port: int) -> Daemon:
        cluster_dir = Path(state.dir)
        return start_daemon(
            "job-server",
            [
                java(env),
                *extra_java_opts(),
                "-cp",
                str(provision.flink_job_server_classpath() / "lib" / "*"),
                "org.apache.beam.runners.flink.FlinkJobServerDriver",
                f"--flink-master=localhost:{state.ports['rest']}",
                f"--flink-conf-dir={cluster_dir / 'conf'}",
                "--job-host=localhost",
                f"--job-port={port}",
                "--artifact-port=0",
                "--expansion-port=0",
            ],
            cluster_dir / "job-server",
            cluster_dir / "logs" / "job-server.log",
            env,
        )

    def flags(self, job_port: int, boot: Path, workers: int, per_worker: int) -> list[str]:
        return runner_flags(job_port, boot, workers * per_worker)


def _flink_daemon(state: ClusterState, name: str, script: str, env: Mapping[str, str]) -> Daemon:
    cluster_dir = Path(state.dir)
    env = {
        **env,
        "FLINK_CONF_DIR": str(cluster_dir / "conf"),
        "FLINK_LOG_DIR": str(cluster_dir / "logs"),
    }
    return start_daemon(
        name,
        [str(provision.flink_home() / "bin" / script), "start-foreground"],
        cluster_dir / name,
        cluster_dir / "logs" / f"{name}.log",
        env,
    )


def start_jobmanager(state: ClusterState, env: Mapping[str, str]) -> Daemon:
    """Start the cluster's JobManager (also to replace one that died: same ports, so the
    TaskManagers and the job server find it again), in ``<dir>/jobmanager/``, logging to
    ``<dir>/logs/jobmanager.log``. Does not wait for it."""
    return _flink_daemon(state, "jobmanager", "jobmanager.sh", env)


def start_taskmanager(state: ClusterState, index: int, env: Mapping[str, str]) -> Daemon:
    """Start TaskManager ``index`` of the cluster (also to replace one that died), in
    ``<dir>/taskmanager-<index>/``, logging to ``<dir>/logs/taskmanager-<index>.log``.
    Does not wait for it to register."""
    return _flink_daemon(state, f"taskmanager-{index}", "taskmanager.sh", env)


def registered_taskmanagers(state: ClusterState) -> int:
    """How many TaskManagers the JobManager's REST API lists now (0 when it does not
    answer)."""
    overview = get_json(f"http://127.0.0.1:{state.ports['rest']}/overview")
    return int(overview.get("taskmanagers", 0)) if isinstance(overview, dict) else 0
