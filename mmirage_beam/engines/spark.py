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
import time
import zipfile
from pathlib import Path
from typing import Mapping, Optional, Sequence

from mmirage_beam.engines import provision, versions
from mmirage_beam.engines.cluster import (
    ClusterState,
    boot_script,
    check_cluster_dir,
    java,
    java_env,
    start_job_server,
    stop_cluster,
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
        "--runner",
        "PortableRunner",
        "--job_endpoint",
        f"localhost:{job_port}",
        "--environment_type",
        "PROCESS",
        "--environment_option",
        f"process_command={boot}",
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
    ``cluster_dir`` and wait until all workers are registered and the job server accepts
    connections (fetching Spark and the job server first if they are not cached).

    Args:
        cluster_dir: the cluster's folder (created; must not hold a running cluster).
        workers: worker JVMs to start (>= 1).
        cores: cores each worker offers (a job's executor on it runs that many tasks
            at once).
        env: the environment of every process (default: this process's); the executors
            and their SDK workers inherit their worker's, so provider keys go here.
        worker_env: per worker, variables added to ``env`` for it alone.
        timeout: seconds for the whole start; past it everything started is stopped.
        say: called with a line for each step (progress for a CLI).

    Returns:
        The saved :class:`ClusterState`; its ``flags`` submit to the cluster.

    Raises:
        EngineError: a piece could not be fetched or started (everything started is
            stopped, the logs are kept and their tails are in the message), or a cluster
            is already running in ``cluster_dir``.
    """
    if workers < 1 or cores < 1:
        raise EngineError("workers and cores must be at least 1")
    cluster_dir = check_cluster_dir(cluster_dir)
    home = provision.spark_home(say=say)
    classpath = provision.spark_job_server_classpath(say=say)
    runner_jar = classpath / "lib" / f"beam-runners-spark-3-{versions.SPARK_JOB_SERVER_VERSION}.jar"
    if any(c.isspace() for c in str(runner_jar)):
        raise EngineError(f"the engine cache path {str(runner_jar)!r} holds a space")
    base_env = java_env(os.environ if env is None else env, "Spark needs Java 17")
    _write_conf(home, cluster_dir / "conf")
    ports = {"master": free_port(), "master_ui": free_port(), "job": 0}
    for i in range(1, workers + 1):
        ports[f"worker-{i}_ui"] = free_port()
    boot = boot_script(cluster_dir)
    state = ClusterState(
        engine="spark",
        dir=str(cluster_dir),
        versions={
            "spark": versions.SPARK_VERSION,
            "beam_job_server": versions.SPARK_JOB_SERVER_VERSION,
            "beam_sdk": versions.beam_sdk_version(),
        },
        ports=ports,
    )
    deadline = time.monotonic() + timeout
    try:
        say(f"starting the Spark master (spark://127.0.0.1:{ports['master']})")
        state.daemons.append(start_master(state, base_env))
        state.save()
        wait_until(
            "the Spark master to accept connections",
            lambda: True if accepts(ports["master"]) else None,
            deadline,
            state.daemons,
        )
        for i in range(1, workers + 1):
            extra = worker_env[i - 1] if i <= len(worker_env) else {}
            state.daemons.append(start_worker(state, i, cores, {**base_env, **extra}))
            state.save()
        say(f"waiting for {workers} worker(s) to register")
        wait_until(
            f"{workers} workers to register with the master",
            lambda: True if registered_workers(state) >= workers else None,
            deadline,
            state.daemons,
        )
        say("starting Beam's Spark job server")
        ports["job"] = start_job_server(
            state, lambda port: _job_server(state, base_env, port), deadline
        )
        state.flags = runner_flags(ports["job"], boot, runner_jar)
    except BaseException:
        stop_cluster(cluster_dir, state=state)
        raise
    state.save()
    return state


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
