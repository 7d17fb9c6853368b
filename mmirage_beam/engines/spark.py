"""A real Spark standalone cluster on this machine, with Beam's Spark job server.

:func:`start_spark` starts, each as its own process (and process group) in its own
folder under the cluster folder ``D``:

- a master (``org.apache.spark.deploy.master.Master``), in ``D/master/``;
- N workers (``org.apache.spark.deploy.worker.Worker``), in ``D/worker-<i>/``, each
  offering ``cores`` cores; for each job a worker starts an executor JVM in
  ``D/worker-<i>/work/<app>/<n>/``, and the executor starts the job's SDK workers there;
- Beam's Spark job server (``org.apache.beam.runners.spark.SparkJobServerDriver``), in
  ``D/job-server/``: it translates the portable pipeline and is the Spark driver of
  each job (one Spark application per job), scheduled by the master.

All are started with ``java -cp`` (no Spark script): Spark's jars
(:func:`~mmirage_beam.engines.provision.spark_home`) for the master and the workers;
Beam's job server jars (:func:`~mmirage_beam.engines.provision.spark_job_server_classpath`)
then Spark's for the job server; the executors get Beam's jars first through
``spark.executor.extraClassPath`` (Spark's Guava 14 first breaks Beam's GCS file system
registrar, which every task deserialises: ``NoSuchMethodError:
Preconditions.checkState(boolean, String, long)``).

The SDK workers use Beam's ``PROCESS`` environment with ``D/sdk-boot.sh``
(:mod:`mmirage_beam.engines.sdk_boot`), as on Flink: an executor and its SDK workers
inherit the environment of their worker, and are in its process group, so killing a
worker's group kills them too. The printed flags add two options to Flink's:

- ``--environment_cache_millis 60000``: Beam's Spark runner releases a task's SDK
  environment when the task ends unless this is set, so every task of every stage
  would boot new Python workers (a 50-row dry run took 2m50s instead of 1m10s here);
- ``--files_to_stage <beam-runners-spark-3 jar>``: without it the job server stages
  its whole classpath (383 jars, 419 MB) into every executor's folder for every job;
  the executors already have those jars.

Everything listens on 127.0.0.1 only, on free ports; Spark's scratch folders are under
``D/local/``. The state is written to ``D/cluster.json``;
:func:`~mmirage_beam.engines.cluster.stop_cluster` stops every process by PID. Logs stay
in ``D/logs/`` (an executor's log is ``stderr`` in its folder).
"""

from __future__ import annotations

import os
import zipfile
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
    accepts,
    free_port,
    get_json,
    start_daemon,
    wait_until,
)
from mmirage_beam.engines.provision import Say

#: The JVM options Spark 3.5's launcher gives its JVMs on Java 17
#: (``org.apache.spark.launcher.JavaModuleOptions``); the executors get them from Spark.
_JAVA_MODULE_OPTIONS = [
    "-XX:+IgnoreUnrecognizedVMOptions",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.net=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.cs=ALL-UNNAMED",
    "--add-opens=java.base/sun.security.action=ALL-UNNAMED",
    "--add-opens=java.base/sun.util.calendar=ALL-UNNAMED",
    "--add-opens=java.security.jgss/sun.security.krb5=ALL-UNNAMED",
    "-Djdk.reflect.useDirectMethodHandle=false",
]
#: Heap of the master and worker daemons (Spark's default SPARK_DAEMON_MEMORY is 1g).
_DAEMON_HEAP = "-Xmx512m"
#: Memory a worker offers, and each executor's heap (one executor per worker and job).
_WORKER_MEMORY = "1g"
#: How long an executor keeps a job's SDK workers after a task (see the module doc).
ENVIRONMENT_CACHE_MILLIS = 60000


def _write_conf(home: Path, conf: Path) -> None:
    """``conf/log4j2.properties``: Spark's default log configuration (INFO to stderr),
    also for the job server (whose Beam code logs before Spark would set it up)."""
    conf.mkdir(parents=True, exist_ok=True)
    core = home / "jars" / f"spark-core_{versions.SPARK_SCALA_VERSION}-{versions.SPARK_VERSION}.jar"
    with zipfile.ZipFile(core) as zf:
        text = zf.read("org/apache/spark/log4j2-defaults.properties")
    (conf / "log4j2.properties").write_bytes(text)


def runner_flags(job_port: int, boot: Path, runner_jar: Path) -> list[str]:
    """The Beam options that run a pipeline on the cluster: the portable runner to the
    job server, PROCESS workers started by the executors, kept for the job's tasks, and
    nothing staged to the executors but the runner jar they already have."""
    return [
        *portable_flags(job_port, boot),
        "--environment_cache_millis",
        str(ENVIRONMENT_CACHE_MILLIS),
        "--files_to_stage",
        str(runner_jar),
    ]


def start_spark(
    cluster_dir: Path,
    workers: int = 2,
    cores: int = 1,
    env: Optional[Mapping[str, str]] = None,
    worker_env: Sequence[Mapping[str, str]] = (),
    timeout: float = 180.0,
    say=lambda _line: None,  # noqa: ANN001
) -> ClusterState:
    """Start a Spark master, ``workers`` workers and Beam's Spark job server in
    ``cluster_dir``: :func:`~mmirage_beam.engines.cluster.start_cluster`, which says
    what ``cluster_dir``, ``env``, ``timeout`` and ``say`` are, what it returns and what
    it raises.

    Args:
        workers: worker JVMs to start (>= 1); the executors and their SDK workers inherit
            their worker's environment.
        cores: cores each worker offers (a job's executor on it runs that many tasks
            at once).
        worker_env: per worker, variables added to ``env`` for it alone.

    Raises:
        EngineError: ``workers`` or ``cores`` is below 1, the engine cache's path holds a
            space, or as ``start_cluster``.
    """
    if workers < 1 or cores < 1:
        raise EngineError("workers and cores must be at least 1")
    return start_cluster(cluster_dir, _Spark(), workers, cores, worker_env, env, timeout, say)


def _runner_jar() -> Path:
    """Beam's Spark runner jar in the job server's classpath (what the flags stage)."""
    jar = f"beam-runners-spark-3-{versions.SPARK_JOB_SERVER_VERSION}.jar"
    return provision.spark_job_server_classpath() / "lib" / jar


class _Spark(Engine):
    """Spark's master and workers (``per_worker`` cores each), and Beam's Spark job
    server."""

    name = "spark"
    roles = ("worker", "master")
    java_releases = "17"
    releases = (versions.SPARK_VERSION, versions.SPARK_JOB_SERVER_VERSION)

    def provision(self, say: Say) -> None:
        provision.spark_home(say=say)
        provision.spark_job_server_classpath(say=say)
        if any(c.isspace() for c in str(_runner_jar())):
            raise EngineError(f"the engine cache path {str(_runner_jar())!r} holds a space")

    def prepare(self, cluster_dir: Path, workers: int, per_worker: int) -> dict[str, int]:
        _write_conf(provision.spark_home(), cluster_dir / "conf")
        ports = {"master": free_port(), "master_ui": free_port(), "job": 0}
        for i in range(1, workers + 1):
            ports[f"worker-{i}_ui"] = free_port()
        return ports

    def launch_master(self, state: ClusterState, env: Env, deadline: float, say: Say) -> None:
        say(f"starting the Spark master (spark://127.0.0.1:{state.ports['master']})")
        state.daemons.append(start_master(state, env))
        state.save()
        wait_until(
            "the Spark master to accept connections",
            lambda: True if accepts(state.ports["master"]) else None,
            deadline,
            state.daemons,
        )

    def launch_worker(self, state: ClusterState, index: int, per_worker: int, env: Env) -> Daemon:
        return start_worker(state, index, per_worker, env)

    def count_registered(self, state: ClusterState) -> int:
        return registered_workers(state)

    def launch_job_server(self, state: ClusterState, env: Env, port: int) -> Daemon:
        return _job_server(state, env, port)

    def flags(self, job_port: int, boot: Path, workers: int, per_worker: int) -> list[str]:
        return runner_flags(job_port, boot, _runner_jar())


def _spark_env(state: ClusterState, name: str, env: Mapping[str, str]) -> dict[str, str]:
    cluster_dir = Path(state.dir)
    local = cluster_dir / "local" / name
    local.mkdir(parents=True, exist_ok=True)
    return {
        **env,
        "SPARK_HOME": str(provision.spark_home()),
        "SPARK_CONF_DIR": str(cluster_dir / "conf"),
        "SPARK_SCALA_VERSION": versions.SPARK_SCALA_VERSION,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(local),
    }


def _spark_daemon(
    state: ClusterState, name: str, args: Sequence[str], env: Mapping[str, str]
) -> Daemon:
    cluster_dir = Path(state.dir)
    jars = provision.spark_home() / "jars" / "*"
    return start_daemon(
        name,
        [
            java(env),
            *_JAVA_MODULE_OPTIONS,
            _DAEMON_HEAP,
            "-cp",
            f"{cluster_dir / 'conf'}{os.pathsep}{jars}",
            *args,
        ],
        cluster_dir / name,
        cluster_dir / "logs" / f"{name}.log",
        _spark_env(state, name, env),
    )


def start_master(state: ClusterState, env: Mapping[str, str]) -> Daemon:
    """Start the cluster's master (also to replace one that died: same ports), in
    ``<dir>/master/``, logging to ``<dir>/logs/master.log``. Does not wait for it."""
    return _spark_daemon(
        state,
        "master",
        [
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(state.ports["master"]),
            "--webui-port",
            str(state.ports["master_ui"]),
        ],
        env,
    )


def start_worker(state: ClusterState, index: int, cores: int, env: Mapping[str, str]) -> Daemon:
    """Start worker ``index`` of the cluster with ``cores`` cores (also to replace one
    that died), in ``<dir>/worker-<index>/`` (executors in its ``work/``), logging to
    ``<dir>/logs/worker-<index>.log``. Does not wait for it to register."""
    name = f"worker-{index}"
    work = Path(state.dir) / name / "work"
    return _spark_daemon(
        state,
        name,
        [
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--cores",
            str(cores),
            "--memory",
            _WORKER_MEMORY,
            "--webui-port",
            str(state.ports[f"{name}_ui"]),
            "--work-dir",
            str(work),
            f"spark://127.0.0.1:{state.ports['master']}",
        ],
        env,
    )


def _job_server(state: ClusterState, env: Mapping[str, str], port: int) -> Daemon:
    """Start Beam's Spark job server (the driver of every job) on job port ``port``, in
    ``<dir>/job-server/``, logging to ``<dir>/logs/job-server.log``. Does not wait."""
    cluster_dir = Path(state.dir)
    beam = provision.spark_job_server_classpath() / "lib" / "*"
    spark = provision.spark_home() / "jars" / "*"
    return start_daemon(
        "job-server",
        [
            java(env),
            *_JAVA_MODULE_OPTIONS,
            f"-Dlog4j.configurationFile=file:{cluster_dir / 'conf' / 'log4j2.properties'}",
            f"-Dspark.executor.extraClassPath={beam}",
            f"-Dspark.executor.memory={_WORKER_MEMORY}",
            "-Dspark.ui.enabled=false",
            "-cp",
            f"{beam}{os.pathsep}{spark}",
            "org.apache.beam.runners.spark.SparkJobServerDriver",
            f"--spark-master-url=spark://127.0.0.1:{state.ports['master']}",
            "--job-host=localhost",
            f"--job-port={port}",
            "--artifact-port=0",
            "--expansion-port=0",
            f"--artifacts-dir={cluster_dir / 'artifacts'}",
        ],
        cluster_dir / "job-server",
        cluster_dir / "logs" / "job-server.log",
        _spark_env(state, "job-server", env),
    )


def registered_workers(state: ClusterState) -> int:
    """How many ALIVE workers the master's web UI lists now (0 when it does not
    answer)."""
    overview = get_json(f"http://127.0.0.1:{state.ports['master_ui']}/json/")
    return int(overview.get("aliveworkers", 0)) if isinstance(overview, dict) else 0
