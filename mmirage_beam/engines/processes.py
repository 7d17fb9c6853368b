"""Daemons of a local engine: started in their own process group with a log file,
waited for with a deadline, stopped by PID.

A daemon started here outlives the command that started it (``mmirage cluster up``
returns while the cluster runs), so everything needed to stop it later is its PID,
kept in the cluster's state file, and its process group: killing the group also kills
what it started (a TaskManager's SDK workers).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, TypeVar

from mmirage_beam.errors import MmirageError

T = TypeVar("T")


class EngineError(MmirageError):
    """An engine could not be fetched, started or stopped. The message says which piece,
    why, and where its log is (the last lines of the log are included)."""

    exit_code = 1


@dataclass
class Daemon:
    """One started process: a name (``taskmanager-1``), PID (also its process group),
    working directory and log file."""

    name: str
    pid: int
    cwd: str
    log: str

    def alive(self) -> bool:
        """Whether the process exists and is not a zombie."""
        return pid_alive(self.pid)

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the log (empty if there is none)."""
        try:
            text = Path(self.log).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def start_daemon(
    name: str,
    argv: Sequence[str],
    cwd: Path,
    log: Path,
    env: Mapping[str, str],
) -> Daemon:
    """Start ``argv`` in ``cwd`` as the leader of a new session (and process group), its
    stdout and stderr appended to ``log``, stdin closed.

    Raises:
        EngineError: the program could not be executed.
    """
    cwd.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        try:
            proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise EngineError(f"could not start {name} ({argv[0]}): {exc}") from exc
    return Daemon(name, proc.pid, str(cwd), str(log))


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (Linux: its /proc state)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: the signal check is all there is
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child: its parent (or init) reaps it


def stop_daemon(daemon: Daemon, grace: float = 15.0) -> bool:
    """SIGTERM ``daemon``'s process group, SIGKILL it after ``grace`` seconds.
    Returns whether the leader is gone."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(daemon.pid, sig)
        except ProcessLookupError:
            return True
        except PermissionError:
            os.kill(daemon.pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(daemon.pid)
            if not daemon.alive():
                return True
            time.sleep(0.1)
    return not daemon.alive()


def kill_daemon(daemon: Daemon) -> None:
    """``kill -9`` the daemon's whole process group at once (a crash, not a stop)."""
    try:
        os.killpg(daemon.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and daemon.alive():
        _reap(daemon.pid)
        time.sleep(0.05)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (another process may take it later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accepts(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def get_json(url: str, timeout: float = 5.0) -> Optional[object]:
    """The JSON body of ``GET url``, or None when it cannot be had (yet)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (loopback)
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def wait_until(
    what: str,
    probe: Callable[[], Optional[T]],
    deadline: float,
    watched: Sequence[Daemon] = (),
) -> T:
    """Call ``probe`` every 0.2 s until it returns something other than None, and return
    that. ``deadline`` is a ``time.monotonic()`` value.

    Raises:
        EngineError: a ``watched`` daemon exited first (with its log's tail), or the
            deadline passed (with the tail of each watched daemon's log).
    """
    while True:
        for d in watched:
            if not d.alive():
                raise EngineError(
                    f"{d.name} exited while waiting for {what}; its log ({d.log}) ends:\n"
                    + d.log_tail()
                )
        got = probe()
        if got is not None:
            return got
        if time.monotonic() > deadline:
            tails = "".join(f"\n--- {d.name} ({d.log}):\n{d.log_tail(15)}" for d in watched)
            raise EngineError(f"timed out waiting for {what}{tails}")
        time.sleep(0.2)
