"""A local engine's folder and state, shared by every engine started here.

``D/cluster.json`` (:class:`ClusterState`) records the engine, its versions, ports, the
PID, folder and log of each process (:class:`~mmirage_beam.engines.processes.Daemon`)
and the runner flags that submit to it; :func:`stop_cluster` stops by those PIDs.
``D/sdk-boot.sh`` (:func:`boot_script`) is the command of Beam's PROCESS environment.
:func:`start_cluster` starts a master, its workers and Beam's job server (Flink's,
Spark's), given the :class:`Engine` that says what differs.
"""

from __future__ import annotations

import abc
import json
import os
import shlex
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from mmirage_beam.engines import versions
from mmirage_beam.engines.processes import (
    Daemon,
    EngineError,
    accepts,
    free_port,
    stop_daemon,
    wait_until,
)
from mmirage_beam.engines.provision import Say

STATE_FILE = "cluster.json"
#: A process environment.
Env = Mapping[str, str]


@dataclass
class ClusterState:
    """What ``D/cluster.json`` holds: the engine, its versions, ports, daemons and the
    runner flags that submit to it."""

    engine: str
    dir: str
    versions: dict
    ports: dict
    daemons: list[Daemon] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)

    def daemon(self, name: str) -> Daemon:
        """The daemon called ``name`` (``jobmanager``, ``taskmanager-1``, ``job-server``).

        Raises:
            KeyError: no such daemon.
        """
        for d in self.daemons:
            if d.name == name:
                return d
        raise KeyError(name)

    def flags_line(self) -> str:
        """The runner flags as one line (what ``cluster up`` prints last), meant to be
        expanded unquoted (``mmirage run ... $FLAGS``): no flag holds whitespace or a
        quote (:func:`start_flink` refuses a folder whose path would)."""
        return " ".join(self.flags)

    def save(self) -> None:
        """Write the state to ``<dir>/cluster.json`` (atomically)."""
        path = Path(self.dir) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def load(cls, cluster_dir: Path) -> ClusterState:
        """The state of the cluster in ``cluster_dir``.

        Raises:
            EngineError: no readable ``cluster.json`` there.
        """
        path = Path(cluster_dir) / STATE_FILE
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise EngineError(f"no cluster in {cluster_dir} ({path}: {exc})") from exc
        data["daemons"] = [Daemon(**d) for d in data.get("daemons", [])]
        return cls(**data)


def boot_script(cluster_dir: Path) -> Path:
    """``D/sdk-boot.sh``: the PROCESS environment's command, this Python running
    :mod:`mmirage_beam.engines.sdk_boot` with whatever the TaskManager passes."""
    path = cluster_dir / "sdk-boot.sh"
    path.write_text(
        "#!/bin/sh\n"
        "# Started by a TaskManager for each SDK worker (Beam's PROCESS environment).\n"
        f'exec {shlex.quote(sys.executable)} -m mmirage_beam.engines.sdk_boot "$@"\n',
        encoding="utf-8",
    )
    path.chmod(0o755)
    return path


def check_cluster_dir(cluster_dir: Path) -> Path:
    """``cluster_dir`` made absolute and created, checked: no cluster may run there, and
    its path may hold no whitespace, quote or shell character (the printed flags name it
    and are expanded unquoted).

    Raises:
        EngineError: either check failed.
    """
    cluster_dir = Path(cluster_dir).resolve()
    if any(c.isspace() or c in "'\"\\$`*?[" for c in str(cluster_dir)):
        raise EngineError(
            f"the cluster folder {str(cluster_dir)!r} holds a space, quote or shell "
            "character; the printed flags name it and are meant for $FLAGS: pick another"
        )
    if (cluster_dir / STATE_FILE).exists():
        try:
            old = ClusterState.load(cluster_dir)
        except EngineError:
            old = None
        _refuse_running(cluster_dir, old)
    cluster_dir.mkdir(parents=True, exist_ok=True)
    return cluster_dir


def _refuse_running(cluster_dir: Path, old: Optional[ClusterState]) -> None:
    if old is None:
        return
    running = [d.name for d in old.daemons if d.alive()]
    if running:
        raise EngineError(
            f"a cluster is already running in {cluster_dir} ({', '.join(running)}); "
            f"stop it first: mmirage cluster down --dir {shlex.quote(str(cluster_dir))}"
        )


def stop_cluster(cluster_dir: Path, state: Optional[ClusterState] = None) -> list[str]:
    """Stop every process of the cluster in ``cluster_dir`` by PID: the job server first,
    then the TaskManagers (with their SDK workers), then the JobManager. Logs are kept;
    the state file is marked stopped.

    Returns:
        The names of the processes that were still running and were stopped.

    Raises:
        EngineError: there is no cluster state in ``cluster_dir``, or a process survived
            SIGKILL.
    """
    state = state or ClusterState.load(cluster_dir)
    stopped, survivors = [], []
    for d in reversed(state.daemons):
        if d.alive():
            stopped.append(d.name)
        if not stop_daemon(d):
            survivors.append(f"{d.name} (pid {d.pid})")
    if survivors:
        raise EngineError(f"could not stop {', '.join(survivors)}")
    return stopped


#: What Beam's JobServerDriver logs once its job service listens, and when it cannot.
_JOB_SERVICE_UP = "JobService started on"
_JOB_SERVICE_FAILED = ("Exception during job server creation", "Failed to bind")


def start_job_server(
    state: ClusterState,
    start: Callable[[int], Daemon],
    deadline: float,
    attempts: int = 3,
) -> int:
    """Start Beam's job server with ``start(job_port)`` on a free port and wait until it
    logs that its job service listens there and the port accepts connections; on a port
    taken between choosing and binding (another process got it first: then the port
    accepts, but not this job server), stop it and try another port.

    The daemon is appended to ``state.daemons`` and the state saved.

    Returns:
        The job port.

    Raises:
        EngineError: it exited, could not bind ``attempts`` times, or the deadline passed.
    """
    for attempt in range(1, attempts + 1):
        port = free_port()
        daemon = start(port)
        state.daemons.append(daemon)
        state.save()

        def ready(daemon: Daemon = daemon, port: int = port) -> object:
            log = daemon.log_tail(200)
            if any(marker in log for marker in _JOB_SERVICE_FAILED):
                return "failed"
            if _JOB_SERVICE_UP in log and f":{port}" in log and accepts(port):
                return "up"
            return None

        got = wait_until(f"the job server on port {port}", ready, deadline, state.daemons)
        if got == "up":
            return port
        stop_daemon(daemon)
        state.daemons.remove(daemon)
        if attempt == attempts:
            raise EngineError(
                f"the job server could not bind a port {attempts} times; its log "
                f"({daemon.log}) ends:\n{daemon.log_tail()}"
            )
    raise AssertionError("not reached")


def java_env(base: Mapping[str, str], needs: str) -> dict[str, str]:
    """``base`` as a dict, once it is known to find a Java (``JAVA_HOME`` or ``java`` on
    its ``PATH``).

    Raises:
        EngineError: no Java; ``needs`` says which engine needs which (``"Flink needs
            Java 11 or 17"``).
    """
    env = dict(base)
    if not env.get("JAVA_HOME") and not shutil.which("java", path=env.get("PATH")):
        raise EngineError(f"{needs}: no JAVA_HOME and no java on PATH")
    return env


def java(env: Mapping[str, str]) -> str:
    """``$JAVA_HOME/bin/java`` when JAVA_HOME is set (as Flink's and Spark's scripts
    choose), else ``java`` from PATH."""
    home = env.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


def portable_flags(job_port: int, boot: Path) -> list[str]:
    """The Beam options every engine started here begins its runner flags with: Beam's
    portable runner to the job service on ``localhost:<job_port>``, and the SDK workers
    started by the engine with Beam's PROCESS environment and the command ``boot``
    (:func:`boot_script`)."""
    return [
        "--runner",
        "PortableRunner",
        "--job_endpoint",
        f"localhost:{job_port}",
        "--environment_type",
        "PROCESS",
        "--environment_option",
        f"process_command={boot}",
    ]


class Engine(abc.ABC):
    """An engine of a master, workers and Beam's job server (Flink, Spark), as
    :func:`start_cluster` starts it: what differs between engines. ``workers`` is how
    many workers the cluster has, ``per_worker`` what each offers (task slots, cores)."""

    #: :attr:`ClusterState.engine` (``"flink"``), capitalised in the progress lines.
    name: str
    #: What a worker and its master are called in the messages (``"TaskManager"``,
    #: ``"JobManager"``).
    roles: tuple[str, str]
    #: The Java releases the engine runs on (``"11 or 17"``), for the error without one.
    java_releases: str
    #: The engine's release and its Beam job server's (:mod:`.versions`).
    releases: tuple[str, str]

    @abc.abstractmethod
    def provision(self, say: Say) -> None:
        """Fetch the engine and its job server into the engine cache if they are not
        there (:mod:`~mmirage_beam.engines.provision`).

        Raises:
            EngineError: they could not be fetched, or cannot be used from there.
        """

    @abc.abstractmethod
    def prepare(self, cluster_dir: Path, workers: int, per_worker: int) -> dict[str, int]:
        """Write the cluster's configuration under ``cluster_dir`` and choose its ports.

        Returns:
            The ports by name (:attr:`ClusterState.ports`); ``"job"`` is 0 until the job
            server is up.
        """

    @abc.abstractmethod
    def launch_master(self, state: ClusterState, env: Env, deadline: float, say: Say) -> None:
        """Start the master with ``env``, append it to ``state.daemons`` and save the
        state; wait until ``deadline`` (``time.monotonic()``) if the workers need it up.
        """

    @abc.abstractmethod
    def launch_worker(self, state: ClusterState, index: int, per_worker: int, env: Env) -> Daemon:
        """Start worker ``index`` (from 1) with ``env``; do not wait for it."""

    @abc.abstractmethod
    def count_registered(self, state: ClusterState) -> int:
        """How many workers the master lists now (0 when it does not answer)."""

    @abc.abstractmethod
    def launch_job_server(self, state: ClusterState, env: Env, port: int) -> Daemon:
        """Start Beam's job server with ``env`` on job port ``port``; do not wait."""

    @abc.abstractmethod
    def flags(self, job_port: int, boot: Path, workers: int, per_worker: int) -> list[str]:
        """The runner flags that submit to the cluster (:func:`portable_flags` and more)."""


def start_cluster(
    cluster_dir: Path,
    engine: Engine,
    workers: int,
    per_worker: int,
    worker_env: Sequence[Env],
    env: Optional[Env],
    timeout: float,
    say: Say,
) -> ClusterState:
    """Start ``engine``'s master, ``workers`` workers and Beam's job server in
    ``cluster_dir`` and wait until all workers are registered and the job server accepts
    connections (fetching the engine and the job server first if they are not cached).

    Args:
        cluster_dir: the cluster's folder (created; must not hold a running cluster).
        engine: what to start.
        workers: workers to start (>= 1).
        per_worker: what each worker offers (>= 1: Flink's task slots, Spark's cores).
        worker_env: per worker, variables added to ``env`` for it alone.
        env: the environment of every process (default: this process's); what a worker
            starts (the SDK workers) inherits the worker's, so provider keys go here.
        timeout: seconds for the whole start; past it everything started is stopped.
        say: called with a line for each step (progress for the CLI).

    Returns:
        The saved :class:`ClusterState`; its ``flags`` submit to the cluster.

    Raises:
        EngineError: a piece could not be fetched or started (everything started is
            stopped, the logs are kept and their tails are in the message), or a cluster
            is already running in ``cluster_dir``.
    """
    cluster_dir = check_cluster_dir(cluster_dir)
    engine.provision(say)
    title = engine.name.capitalize()
    base_env = java_env(
        os.environ if env is None else env, f"{title} needs Java {engine.java_releases}"
    )
    ports = engine.prepare(cluster_dir, workers, per_worker)
    boot = boot_script(cluster_dir)
    release, job_server_release = engine.releases
    state = ClusterState(
        engine=engine.name,
        dir=str(cluster_dir),
        versions={
            engine.name: release,
            "beam_job_server": job_server_release,
            "beam_sdk": versions.beam_sdk_version(),
        },
        ports=ports,
    )
    worker, master = engine.roles
    deadline = time.monotonic() + timeout
    try:
        engine.launch_master(state, base_env, deadline, say)
        for i in range(1, workers + 1):
            extra = worker_env[i - 1] if i <= len(worker_env) else {}
            daemon = engine.launch_worker(state, i, per_worker, {**base_env, **extra})
            state.daemons.append(daemon)
            state.save()
        say(f"waiting for {workers} {worker}(s) to register")
        wait_until(
            f"{workers} {worker}s to register with the {master}",
            lambda: True if engine.count_registered(state) >= workers else None,
            deadline,
            state.daemons,
        )
        say(f"starting Beam's {title} job server")
        ports["job"] = start_job_server(
            state, lambda port: engine.launch_job_server(state, base_env, port), deadline
        )
        state.flags = engine.flags(ports["job"], boot, workers, per_worker)
    except BaseException:
        stop_cluster(cluster_dir, state=state)
        raise
    state.save()
    return state
