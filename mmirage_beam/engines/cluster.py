"""A local engine's folder and state, shared by every engine started here.

``D/cluster.json`` (:class:`ClusterState`) records the engine, its versions, ports, the
PID, folder and log of each process (:class:`~mmirage_beam.engines.processes.Daemon`)
and the runner flags that submit to it; :func:`stop_cluster` stops by those PIDs.
``D/sdk-boot.sh`` (:func:`boot_script`) is the command of Beam's PROCESS environment.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional

from mmirage_beam.engines.processes import (
    Daemon,
    EngineError,
    accepts,
    free_port,
    stop_daemon,
    wait_until,
)

STATE_FILE = "cluster.json"


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
