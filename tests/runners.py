"""Real Beam runners for the tests: the option sets of the runner matrix, and Beam's own
portable services (job service + external SDK worker pool) started as separate processes.

    with PortableServices(tmp / "services", worker_env({"OPENAI_API_KEY": "sk-..."})) as svc:
        flags = runner_flags("portable_external", svc)   # --runner PortableRunner ...
        proc = run_cli(["run", "--config", "c.yaml", *flags], cwd=launcher, env=env)

``PortableServices`` starts ``python -m apache_beam.runners.portability.local_job_service_main``
and ``python -m apache_beam.runners.worker.worker_pool_main`` with this interpreter (the
project's venv), each in its own working directory and process group, on free loopback
ports (the job service's is picked by the OS, ``--port 0``, and read from its port file;
the pool's is picked free just before it starts, retried if taken), and waits until both
accept TCP connections. ``stop()`` sends SIGTERM to
each process group, SIGKILL after a grace period, and reaps every process of the group:
the pool does not wait for the SDK workers it starts (they stay ``<defunct>``), so the test
process makes itself a child subreaper (Linux ``prctl``) and waits for them itself.

The SDK workers the pool starts inherit the pool's environment (``python -c
'...SdkHarness(...)'``, found on ``PATH``), so provider keys, base URLs and plugin paths a
test needs on the workers go into ``worker_env(...)``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence, TypeVar

import pytest

REPO = Path(__file__).resolve().parent.parent
#: The runner matrix, in the order the tests run it.
RUNNERS = ("direct", "multi_processing", "portable_external", "portable_loopback")
PORTABLE_RUNNERS = ("portable_external", "portable_loopback")
#: Set to 1 (CI does) to fail instead of skip when the job service cannot start.
REQUIRE_ENV_VAR = "MMIRAGE_REQUIRE_PORTABLE"
_PR_SET_CHILD_SUBREAPER = 36


_T = TypeVar("_T")


def start_or_skip(
    start: Callable[[], _T], errors: tuple[type[BaseException], ...], what: str
) -> _T:
    """``start()``; when it raises one of ``errors``, skip the test saying ``what`` cannot
    start here (fail instead with ``$MMIRAGE_REQUIRE_PORTABLE=1``, as CI does)."""
    try:
        return start()
    except errors as exc:
        if os.environ.get(REQUIRE_ENV_VAR) == "1":
            raise
        pytest.skip(f"{what} cannot be fetched or started here: {exc}")


class ServiceStartError(RuntimeError):
    """A Beam service did not start (its log tail is in the message)."""


@dataclass
class Service:
    """One started service: its process (leader of its own group), port, folder and log."""

    name: str
    proc: subprocess.Popen
    port: int
    cwd: Path
    log: Path

    @property
    def address(self) -> str:
        return f"localhost:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def clean_env(extra: Optional[Mapping[str, str]] = None, pythonpath: Iterable[str] = ()) -> dict:
    """``os.environ`` without provider keys or base URLs, with this venv's ``bin`` first on
    ``PATH`` (the pool starts workers as plain ``python``), ``REPO`` and ``pythonpath`` on
    ``PYTHONPATH``, then ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not (
            k.endswith(("_API_KEY", "_API_KEY_FILE", "_BASE_URL"))
            or k in ("MMIRAGE_PLUGINS", "PYTHONPATH")
        )
    }
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), str(REPO)])
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


worker_env = clean_env


def runner_flags(name: str, services: Optional[PortableServices] = None) -> list[str]:
    """The Beam pipeline options of runner ``name`` (one of :data:`RUNNERS`)."""
    if name == "direct":
        return []  # DirectRunner, in memory (Beam's default)
    if name == "multi_processing":
        return ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]
    if services is None:
        raise ValueError(f"runner {name!r} needs the portable services")
    portable = ["--runner", "PortableRunner", "--job_endpoint", services.job.address]
    if name == "portable_external":
        return [
            *portable,
            "--environment_type",
            "EXTERNAL",
            "--environment_config",
            services.pool.address,
            "--sdk_worker_parallelism",
            "2",
        ]
    if name == "portable_loopback":
        return [*portable, "--environment_type", "LOOPBACK"]
    raise ValueError(f"unknown runner {name!r}; known: {', '.join(RUNNERS)}")


def run_cli(
    args: Sequence[str], cwd: Path, env: Mapping[str, str], timeout: float = 300
) -> subprocess.CompletedProcess:
    """``python -m pipelines.cli ARGS`` (the ``mmirage`` command) in ``cwd``, in its own
    process group (killed whole on timeout). Returns the completed process (text output)."""
    cmd = [sys.executable, "-m", "pipelines.cli", *args]
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        out, err = proc.communicate()
        raise AssertionError(f"{cmd} timed out after {timeout}s:\n{err[-3000:]}") from None
    finally:
        stop_group(proc, grace=5)  # e.g. a multi_processing worker left behind
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_cli_in_process(
    args: Sequence[str], cwd: Path, env: Mapping[str, str]
) -> subprocess.CompletedProcess:
    """``mmirage ARGS`` as :func:`run_cli` runs it, but by ``pipelines.cli.main`` in this
    process: in ``cwd``, with exactly ``env`` as the environment, stdout and stderr
    captured (the folder, environment and streams are put back after). Returns a
    completed process whose returncode is main's exit status (an argparse exit's code).

    For commands on the in-memory DirectRunner where the process is not the point: a
    cold ``mmirage`` process costs seconds of imports per command. What only a process
    shows (a signal, a crash, flags read by a fresh interpreter) needs :func:`run_cli`."""
    import contextlib
    import io

    from pipelines.cli import main as cli_main

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli_main(list(args))
            except SystemExit as exc:  # argparse errors exit as the process would
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["mmirage", *args], code, out.getvalue(), err.getvalue())


@dataclass
class PortableServices:
    """Beam's job service and an external worker pool, in separate processes and folders.

    Args:
        workdir: parent folder; ``job/`` and ``pool/`` (the processes' working
            directories, left empty by them) and ``logs/`` are created in it.
        pool_env: the worker pool's (and so its SDK workers') environment.
        timeout: seconds to wait for each service to accept connections.
    """

    workdir: Path
    pool_env: Mapping[str, str]
    timeout: float = 90.0
    job: Service = field(init=False)
    pool: Service = field(init=False)

    def __enter__(self) -> PortableServices:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start both services and wait until both accept connections.

        Does nothing if they are already running (so ``with`` after ``start()`` is fine).

        Raises:
            ServiceStartError: either one exited or did not listen within ``timeout``
                (both are stopped first).
        """
        if getattr(self, "_services", None):
            return
        _become_subreaper()
        logs = self.workdir / "logs"
        for d in ("job", "pool", "logs"):
            (self.workdir / d).mkdir(parents=True, exist_ok=True)
        self._services: list[Service] = []
        try:
            port_file = logs / "job.port"
            proc, log = _spawn(
                "job",
                [
                    "-m",
                    "apache_beam.runners.portability.local_job_service_main",
                    "--port",
                    "0",
                    "--port_file",
                    str(port_file),
                ],
                self.workdir / "job",
                clean_env(),
                logs,
            )
            self._services.append(Service("job service", proc, 0, self.workdir / "job", log))
            self.job = self._services[-1]
            self.job.port = _wait_for(
                self.job, lambda: _read_int(port_file) if port_file.exists() else None, self
            )
            # The pool logs its port only if logging happens to be configured, so it gets
            # a free port chosen here (another process may take it first: then retry).
            for attempt in range(3):
                port = _free_port()
                proc, log = _spawn(
                    "pool",
                    [
                        "-m",
                        "apache_beam.runners.worker.worker_pool_main",
                        "--service_port",
                        str(port),
                    ],
                    self.workdir / "pool",
                    dict(self.pool_env),
                    logs,
                )
                self.pool = Service("worker pool", proc, port, self.workdir / "pool", log)
                self._services.append(self.pool)
                try:
                    _wait_for(self.pool, lambda port=port: port, self)
                    break
                except ServiceStartError:
                    if attempt == 2 or proc.poll() is None:
                        raise
        except BaseException:
            self.stop()
            raise

    def stop(self) -> list[str]:
        """Stop every started service and reap its whole process group (idempotent).
        Returns a description of any process that could not be reaped (normally none)."""
        leftovers = []
        for svc in reversed(getattr(self, "_services", [])):
            leftovers += stop_group(svc.proc)
        self._services = []
        return leftovers

    def worker_processes(self) -> list[int]:
        """Pids of the pool's live SDK workers (its process group, but not the pool)."""
        return [
            pid
            for pid, state, _ in _group_members(self.pool.proc.pid)
            if pid != self.pool.proc.pid and state != "Z"
        ]


def stop_group(proc: subprocess.Popen, grace: float = 10.0) -> list[str]:
    """SIGTERM ``proc``'s process group, SIGKILL it after ``grace`` seconds, wait for
    ``proc`` and reap the other members that were re-parented to this process.
    Returns ``"pid (state, parent ppid)"`` for members still present afterwards."""
    pgid = proc.pid
    members = {pid for pid, _, _ in _group_members(pgid)}
    _kill_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(_group_members(pgid)):
        _reap(members | {pid for pid, _, _ in _group_members(pgid)}, exclude=proc.pid)
        time.sleep(0.1)
    _kill_group(pgid, signal.SIGKILL)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + grace
    while True:
        now = _group_members(pgid)
        members |= {pid for pid, _, _ in now}
        _reap(members, exclude=proc.pid)
        now = _group_members(pgid)
        if not now or time.monotonic() > deadline:
            return [f"{pid} ({state}, parent {ppid})" for pid, state, ppid in now]
        time.sleep(0.1)


def _spawn(name, args, cwd, env, logs):  # noqa: ANN001, ANN202
    log = logs / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so stop() gets the workers too
        )
    return proc, log


def _wait_for(svc: Service, port_of, services: PortableServices) -> int:  # noqa: ANN001
    deadline = time.monotonic() + services.timeout
    while time.monotonic() < deadline:
        if svc.proc.poll() is not None:
            raise ServiceStartError(
                f"Beam's {svc.name} exited with status {svc.proc.returncode}:\n"
                + svc.log_text()[-3000:]
            )
        port = port_of()
        if port and _accepts(port):
            return port
        time.sleep(0.1)
    raise ServiceStartError(
        f"Beam's {svc.name} did not accept connections within {services.timeout}s:\n"
        + svc.log_text()[-3000:]
    )


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _read_int(path: Path) -> Optional[int]:
    text = path.read_text(encoding="utf-8").strip()
    return int(text) if text.isdigit() else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _become_subreaper() -> None:
    """Orphaned descendants (the pool's workers once the pool is gone) are re-parented to
    this process instead of init, so they can be reaped here. Linux only; elsewhere init
    reaps them."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass


def _group_members(pgid: int) -> list[tuple[int, str, int]]:
    """``(pid, state, ppid)`` of every process in process group ``pgid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        state, ppid, group = fields[0], int(fields[1]), int(fields[2])
        if group == pgid:
            found.append((int(entry.name), state, ppid))
    return found


def _alive(members: list[tuple[int, str, int]]) -> bool:
    return any(state != "Z" for _, state, _ in members)


def _reap(pids: Iterable[int], exclude: int) -> None:
    for pid in pids:
        if pid == exclude:
            continue
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass  # not (or no longer) our child: its parent or init reaps it


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
