"""Worker scaling on the portable runner: the dry run and the merge with 1 and 2 SDK workers.

Usage:
    python benchmarks/bench_workers.py [--rows 1000000] [--order 1,2,2,1]
        [--max-chunk-bytes B] [--no-merge] [--stock-job-service] [--workdir DIR] [--keep]

For N rows (GSM8K cycled, as ``bench_scale.py`` makes them) every case runs on Beam's
portable runner against Beam's Python job service and an external SDK worker pool
(``worker_pool_main``), both started fresh for the case, in their own folders and process
groups, so the CPU and memory of the job are the launcher's, the job service's and the
pool's and its workers':

1. ``dry run``: ``mmirage run --export-prompts`` with ``--sdk_worker_parallelism W`` for
   every W of ``--order`` (default 1,2,2,1: interleaved).
2. ``merge``: one submission to the embedded fake provider (untimed, 2 workers), ``mmirage
   check --watch`` until done, then ``mmirage merge`` of that run for every W of ``--order``.

The stock job service of Beam 2.77 (``local_job_service_main``) runs every job with ONE SDK
worker whatever the options say: ``BeamJob._invoke_runner`` calls
``FnApiRunner.run_via_runner_api``, which keeps ``FnApiRunner._num_workers = 1``; only
``FnApiRunner.run_pipeline`` (the in-process DirectRunner path) reads
``--direct_num_workers``, and nothing in the Python runner reads
``--sdk_worker_parallelism`` (Flink's and Spark's job servers do). So the job service here
is ``local_job_service_main`` with one change (:func:`job_service_main`): the runner's worker
count is the job's ``--sdk_worker_parallelism``. The FnApiRunner then asks the pool for that
many workers (one ``StartWorker`` each, one process each) and splits every stateless
stage's input between them (``ParallelBundleManager``); a stateful stage runs on one worker.
``--stock-job-service`` runs Beam's own one, to see that. The report counts the worker
processes the pool started and the CPU seconds of each, so "2 workers" is checked, not
assumed.

Measured per case: wall time of the launcher; CPU seconds (user + system) of the launcher
and its children (``os.wait4``) plus the job service's and the pool's process groups
(``/proc/<pid>/stat`` of every member, workers included, before and after the case); peak
RSS of all of them together (summed, sampled every 50 ms). Outputs are compared between
all runs of a case: the dry run's request lines and placeholder rows as multisets, the
merged file by sha256. Prints a Markdown report (also ``<workdir>/bench_workers.md``);
exits 1 when outputs differ or a case did not get the workers it asked for.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_scale as bs  # noqa: E402  (the inputs, config, fake provider and checks)

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
MiB = bs.MiB
_PR_SET_CHILD_SUBREAPER = 36


# --------------------------------------------------------------------------- job service


def job_service_main(argv: list[str]) -> int:
    """Beam's ``local_job_service_main`` whose FnApiRunner uses as many SDK workers as the
    job's ``--sdk_worker_parallelism`` (Beam's own keeps 1: see the module docstring)."""
    from apache_beam.options.pipeline_options import PortableOptions
    from apache_beam.portability.api import beam_job_api_pb2
    from apache_beam.runners.portability import local_job_service, local_job_service_main
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    def _invoke_runner(self):  # noqa: ANN001, ANN202  (BeamJob._invoke_runner, plus one line)
        self.set_state(beam_job_api_pb2.JobState.RUNNING)
        options = self.pipeline_options()
        runner = fn_runner.FnApiRunner(provision_info=self._provision_info)
        runner._num_workers = max(1, int(options.view_as(PortableOptions).sdk_worker_parallelism))
        return runner.run_via_runner_api(self._pipeline_proto, options)

    local_job_service.BeamJob._invoke_runner = _invoke_runner
    local_job_service_main.run(argv)
    return 0


# --------------------------------------------------------------------------- processes
# A minimal copy of tests/runners.py's PortableServices (benchmarks do not import tests/).


class Ticks(NamedTuple):
    """One process of a watched process group, from ``/proc/<pid>/stat``."""

    state: str  # "R", "S", "Z"...
    total: int  # CPU ticks: utime + stime + cutime + cstime (its reaped children included)
    own: int  # utime + stime: the process alone
    pgid: int


_NONE = Ticks("", 0, 0, 0)


def _groups(pgids: Iterable[int]) -> dict[int, Ticks]:
    """``{pid: Ticks}`` of every process in the process groups ``pgids`` (one scan of
    ``/proc``; zombies keep their ticks until reaped, then they count in the reaper's)."""
    wanted = set(pgids)
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # from field 3, "state"
        if int(fields[2]) in wanted:
            ticks = [int(x) for x in fields[11:15]]
            found[int(entry.name)] = Ticks(fields[0], sum(ticks), sum(ticks[:2]), int(fields[2]))
    return found


def _group(pgid: int) -> dict[int, Ticks]:
    """``{pid: Ticks}`` of process group ``pgid``."""
    return _groups([pgid])


def cpu_seconds(before: dict[int, Ticks], after: dict[int, Ticks], pids: Iterable[int]) -> float:
    """CPU seconds (user + system, reaped children included) that processes ``pids`` used
    between the two readings."""
    return sum(after[p].total - before.get(p, _NONE).total for p in pids if p in after) / CLK_TCK


def service_env() -> dict[str, str]:
    """The environment of the services the benchmarks start (a job service, a worker pool,
    a Flink cluster): the fake provider's key, this venv's ``bin`` first on ``PATH`` (a
    pool starts its workers as plain ``python``), the repository on ``PYTHONPATH``."""
    env = dict(os.environ, OPENAI_API_KEY=bs.FAKE_KEY, PYTHONUNBUFFERED="1")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([str(bs.REPO), env.get("PYTHONPATH", "")])
    return env


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class Services:
    """A job service and an external worker pool, each its own process group and folder."""

    def __init__(self, folder: Path, stock: bool) -> None:
        self.folder = folder
        for d in ("job", "pool"):
            (folder / d).mkdir(parents=True, exist_ok=True)
        port_file = folder / "job.port"
        job_args = ["--port", "0", "--port_file", str(port_file)]
        if stock:
            job_cmd = ["-m", "apache_beam.runners.portability.local_job_service_main", *job_args]
        else:
            job_cmd = [str(Path(__file__).resolve()), "--job-service", *job_args]
        self.job = self._spawn("job", job_cmd)
        self.job_port = self._wait(self.job, lambda: _read_port(port_file))
        self.pool_port = bs.free_port()
        self.pool = self._spawn(
            "pool",
            ["-m", "apache_beam.runners.worker.worker_pool_main", "--service_port"]
            + [str(self.pool_port)],
        )
        self._wait(self.pool, lambda: self.pool_port)

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        env = service_env()
        with open(self.folder / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, *args],
                cwd=self.folder / name,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        bs._LIVE.append(proc)
        return proc

    def _wait(self, proc: subprocess.Popen, port_of: Any) -> int:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            port = port_of()
            if port and _accepts(port):
                return port
            time.sleep(0.1)
        self.stop()
        sys.exit(f"a Beam service did not start; see {self.folder}/*.log")

    def flags(self, workers: int) -> list[str]:
        return [
            "--runner=PortableRunner",
            f"--job_endpoint=localhost:{self.job_port}",
            "--environment_type=EXTERNAL",
            f"--environment_config=localhost:{self.pool_port}",
            f"--sdk_worker_parallelism={workers}",
        ]

    def members(self) -> dict[int, Ticks]:
        return _groups([self.job.pid, self.pool.pid])

    def stop(self) -> None:
        for proc in (self.pool, self.job):
            pids = set(_group(proc.pid))
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except OSError:
                pass
            bs._stop(proc)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            for pid in pids - {proc.pid}:  # the pool's workers, re-parented to us
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass


def _read_port(path: Path) -> Optional[int]:
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text.isdigit() else None


class Run:
    """One measured case."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


def run_launcher(
    cmd: list[str], cwd: Path, members: Callable[[], dict[int, Ticks]], label: str
) -> Run:
    """Run ``cmd`` (a launcher) in ``cwd`` while the services it talks to run as the
    process groups that ``members()`` reads; exits the benchmark with the launcher's
    output if it fails.

    Returns a :class:`Run`: ``wall`` (s), ``started`` (epoch s), ``launcher_cpu`` (user +
    system of the launcher and the descendants it waited for, ``os.wait4``), ``before``
    and ``after`` (``members()`` just before and after), ``seen`` (every member seen
    meanwhile, at its last reading, read every :data:`bs.CHILDREN_SCAN_SECS`),
    ``peak_rss`` (the largest sum of the RSS of the launcher's tree and every member,
    every :data:`bs.POLL_SECS`), ``idle_rss`` (the members' before the launch), ``load``
    (1-minute load before and after) and ``log`` (the launcher's output)."""
    import psutil

    def processes(found: dict[int, Ticks]) -> list:
        out = []
        for pid in found:
            try:
                out.append(psutil.Process(pid))
            except psutil.Error:
                pass
        return out

    before = members()
    idle_rss = bs._rss_sum(processes(before))
    seen = dict(before)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryFile() as out:
        started, start = time.time(), time.perf_counter()
        env = dict(os.environ, OPENAI_API_KEY=bs.FAKE_KEY)
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        bs._LIVE.append(proc)
        peak, done = [0], threading.Event()

        def poll() -> None:
            known: list = []
            next_scan = 0.0
            while not done.is_set():
                if time.monotonic() >= next_scan:
                    try:
                        ps = psutil.Process(proc.pid)
                        known = [ps, *ps.children(recursive=True)]
                    except psutil.Error:
                        known = []
                    now = members()
                    seen.update(now)
                    known += processes(now)
                    next_scan = time.monotonic() + bs.CHILDREN_SCAN_SECS
                peak[0] = max(peak[0], bs._rss_sum(known))
                done.wait(bs.POLL_SECS)

        watcher = threading.Thread(target=poll, daemon=True)
        watcher.start()
        try:
            _pid, status, usage = os.wait4(proc.pid, 0)
        finally:
            done.set()
        wall = time.perf_counter() - start
        watcher.join()
        bs._LIVE.remove(proc)
        out.seek(0)
        log = out.read().decode("utf-8", "replace")
    after = members()
    seen.update(after)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"case {label!r} failed: {' '.join(cmd)}\n{log[-5000:]}")
    return Run(
        wall=wall,
        started=started,
        launcher_cpu=usage.ru_utime + usage.ru_stime,
        before=before,
        after=after,
        seen=seen,
        peak_rss=peak[0],
        idle_rss=idle_rss,
        load=(load0, os.getloadavg()[0]),
        log=log,
    )


def measure(cmd: list[str], cwd: Path, svc: Services, label: str) -> Run:
    """Run ``cmd`` (the launcher) against ``svc``; wall, CPU and peak RSS of the launcher's
    tree plus both services' groups; each worker process's CPU seconds."""
    run = run_launcher(cmd, cwd, svc.members, label)
    before, after = run.before, run.after
    service_pids = {svc.job.pid, svc.pool.pid}
    run.job_cpu = cpu_seconds(before, after, [svc.job.pid])
    run.pool_cpu = cpu_seconds(before, after, [svc.pool.pid])
    run.worker_cpu = sorted(
        (cpu_seconds(before, after, [pid]) for pid in after if pid not in service_pids),
        reverse=True,
    )
    return run


# --------------------------------------------------------------------------- the cases
# The dry run and the merge as every scaling benchmark runs them (bench_engines.py too).


def dry_run_command(folder: Path, rows: Path, max_chunk_bytes: int, flags: list[str]) -> list[str]:
    """``mmirage run --export-prompts`` of ``rows`` (run id ``dry``) writing under
    ``folder`` (its config ``folder/dry.yaml``), with the runner ``flags``."""
    cfg = bs.write_yaml(folder / "dry.yaml", bs.text_config(folder, rows, max_chunk_bytes))
    export = str(folder / "prompts.jsonl")
    command = bs._mmirage("run", "--config", str(cfg), "--export-prompts", export)
    return [*command, "--run-id", "dry", *flags]


def dry_run_output(folder: Path) -> tuple:
    """What a dry run in ``folder`` wrote: (request lines, placeholder rows) as multiset
    digests ``(count, digest)``, and the number of chunks."""
    export = folder / "prompts.dry.jsonl"
    shards = sorted((folder / "shards").glob("**/placeholders.dry-*"))
    return (
        bs.multiset_digest(bs.export_requests(export)),
        bs.multiset_digest(bs.file_lines(shards)),
        len(bs.export_batch_ids(export)),
    )


def submit_to_fake(
    live: Path, rows: Path, max_chunk_bytes: int, fake: bs.Fake, submit: Callable
) -> Path:
    """Submit ``rows`` to ``fake`` (run id ``live``, under ``live``) by calling ``submit``
    with the ``mmirage run`` command (the caller adds its runner flags and measures), then
    wait with ``mmirage check --watch`` until every batch has completed. Returns the
    config (``live/live.yaml``)."""
    cfg = bs.write_yaml(
        live / "live.yaml", bs.text_config(live, rows, max_chunk_bytes, fake.openai_base_url)
    )
    submit(bs._mmirage("run", "--config", str(cfg), "--run-id", "live"))
    env = dict(os.environ, OPENAI_API_KEY=bs.FAKE_KEY)
    watch = ["--run-id", "live", "--watch", "--interval", "1", "--timeout", "1800"]
    done = subprocess.run(
        bs._mmirage("check", "--config", str(cfg), *watch),
        cwd=live,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"mmirage check --watch failed:\n{done.stdout}\n{done.stderr}")
    return cfg


def merge_command(folder: Path, cfg: Path, flags: list[str]) -> list[str]:
    """``mmirage merge`` of run ``live`` of ``cfg`` into ``folder/merged.jsonl``."""
    out = str(folder / "merged.jsonl")
    command = bs._mmirage("merge", "--config", str(cfg), "--run-id", "live")
    return [*command, "--output-path", out, *flags]


def merge_output(folder: Path) -> tuple:
    """(sha256, rows) of the merged file in ``folder``."""
    merged = folder / "merged.jsonl"
    return (bs.sha256_file(merged), bs.count_lines(merged))


def machine_line(load_start: str) -> str:
    """The report's machine line: CPUs, RAM, architecture, load at start and now."""
    return (
        f"- machine: {os.cpu_count()} CPUs (nproc, shared), {bs._total_ram_gib():.1f} GiB "
        f"RAM, {platform.machine()}; load average at start {load_start}, at end "
        + ", ".join(f"{x:.2f}" for x in os.getloadavg())
    )


def inputs_line(rows: int, max_chunk_bytes: int) -> str:
    """The report's line on the inputs and the chunking limits."""
    return (
        f"- {rows:,} GSM8K rows, one OpenAI output; max_requests_per_chunk "
        f"{bs.MAX_REQUESTS_PER_CHUNK:,}, max_chunk_bytes {max_chunk_bytes:,}"
    )


# --------------------------------------------------------------------------- the benchmark


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        self.runs: list[Run] = []
        self.notes: list[str] = []
        self.failed: list[str] = []

    def log(self, msg: str) -> None:
        print(f"[workers {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def case(self, case: str, workers: int, i: int, cmd_of: Any, check_of: Any) -> None:
        folder = self.work / f"{case.replace(' ', '-')}-{i}-w{workers}"
        folder.mkdir(parents=True, exist_ok=True)
        svc = Services(folder / "services", self.args.stock_job_service)
        try:
            cmd = cmd_of(folder, svc.flags(workers))
            run = measure(cmd, folder, svc, f"{case}, {workers} worker(s)")
        finally:
            svc.stop()
        run.case, run.workers, run.index, run.output = case, workers, i, check_of(folder)
        run.cpu = run.launcher_cpu + run.job_cpu + run.pool_cpu + sum(run.worker_cpu)
        if len(run.worker_cpu) != workers:  # each worker's CPU is in the table
            self.failed.append(
                f"{case} #{i}: asked for {workers} worker(s), the pool started "
                f"{len(run.worker_cpu)}"
            )
        self.runs.append(run)
        partial = self.report(self.started, self.load_start, complete=False)
        (self.work / "bench_workers.md").write_text(partial, encoding="utf-8")
        if not self.args.keep:
            bs._rm(folder)
        self.log(
            f"{case:<8} {workers} worker(s)  wall {run.wall:7.1f} s  CPU {run.cpu:7.1f} s "
            f"(launcher {run.launcher_cpu:.1f}, job service {run.job_cpu:.1f}, workers "
            f"{' + '.join(f'{c:.1f}' for c in run.worker_cpu) or '-'})  peak RSS "
            f"{run.peak_rss / MiB:,.0f} MiB  load {run.load[0]:.2f} -> {run.load[1]:.2f}"
        )

    def dry_runs(self, rows: Path) -> None:
        def cmd_of(folder: Path, flags: list[str]) -> list[str]:
            return dry_run_command(folder, rows, self.args.max_chunk_bytes, flags)

        for i, w in enumerate(self.args.order):
            self.case("dry run", w, i, cmd_of, dry_run_output)

    def merges(self, rows: Path) -> None:
        live = self.work / "live"
        live.mkdir(parents=True, exist_ok=True)
        fake = bs.Fake(live / "fake.log")
        try:
            self.log("submitting to the fake provider (untimed, 2 workers)")

            def submit(cmd: list[str]) -> None:
                svc = Services(live / "services", self.args.stock_job_service)
                try:
                    measure([*cmd, *svc.flags(2)], live, svc, "submit")
                finally:
                    svc.stop()

            cfg = submit_to_fake(live, rows, self.args.max_chunk_bytes, fake, submit)

            def cmd_of(folder: Path, flags: list[str]) -> list[str]:
                return merge_command(folder, cfg, flags)

            for i, w in enumerate(self.args.order):
                self.case("merge", w, i, cmd_of, merge_output)
        finally:
            fake.stop()

    def report(self, started: str, load_start: str, complete: bool = True) -> str:
        """The Markdown report of the runs so far (``complete``: the last call, which
        records differing outputs as failures)."""
        a, n = self.args, self.args.rows
        job = (
            "Beam's stock local_job_service_main"
            if a.stock_job_service
            else (
                "local_job_service_main with the worker count of --sdk_worker_parallelism "
                "(job_service_main)"
            )
        )
        lines = [
            "## mmirage-beam worker scaling (portable runner, external worker pool)"
            + ("" if complete else " (in progress)"),
            "",
            f"- date: {started} (UTC); `python benchmarks/bench_workers.py {a._command}`",
            machine_line(load_start),
            f"- Python {platform.python_version()}, Apache Beam {bs._beam_version()}, "
            f"mmirage-beam {bs._git_rev()}; PortableRunner, EXTERNAL environment, {job}",
            inputs_line(n, a.max_chunk_bytes)
            + "; chunking_parallelism unset (its default follows the worker count)",
            "- CPU s = user + sys of launcher + job service + pool + its workers (worker "
            "column: each worker process); peak RSS = largest sum over all of them, "
            "every 50 ms; rows/s per worker = rows/s / workers; rows/CPU-s = rows / CPU s",
            "",
            "| case | workers | run | wall s | CPU s | launcher / job svc / workers CPU s "
            "| worker processes (CPU s each) | peak RSS MiB | rows/s | rows/s per worker "
            "| rows per CPU-s | load 1-min before -> after |",
            "|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---|",
        ]
        for r in self.runs:
            lines.append(
                f"| {r.case} | {r.workers} | {r.index + 1} | {r.wall:.1f} | {r.cpu:.1f} | "
                f"{r.launcher_cpu:.1f} / {r.job_cpu + r.pool_cpu:.1f} / "
                f"{sum(r.worker_cpu):.1f} | {len(r.worker_cpu)} "
                f"({' + '.join(f'{c:.1f}' for c in r.worker_cpu)}) | "
                f"{r.peak_rss / MiB:,.0f} | {n / r.wall:,.0f} | {n / r.wall / r.workers:,.0f} | "
                f"{n / r.cpu:,.0f} | {r.load[0]:.2f} -> {r.load[1]:.2f} |"
            )
        lines += [
            "",
            "| case | wall s 1 / 2 workers | speedup 2 vs 1 | CPU s 1 / 2 | rows/s per "
            "worker 1 / 2 | rows per CPU-s 1 / 2 | peak RSS MiB 1 / 2 | outputs 1 vs 2 |",
            "|---|---|---:|---|---|---|---|---|",
        ]
        for case in ("dry run", "merge"):
            by = {w: [r for r in self.runs if r.case == case and r.workers == w] for w in (1, 2)}
            if not by[1] or not by[2]:
                continue

            def med(w: int, attr: str, by: dict = by) -> float:
                return statistics.median(getattr(r, attr) for r in by[w])

            same = len({r.output for r in by[1] + by[2]}) == 1
            first = by[1][0].output
            what = (
                f"{first[0][0]:,} request lines and {first[1][0]:,} placeholder rows (multisets)"
                if case == "dry run"
                else f"merged file, {first[1]:,} rows (sha256)"
            )
            if case == "dry run":
                chunks = sorted({r.output[2] for r in by[1] + by[2]})
                what += f"; chunks {'/'.join(map(str, chunks))}"
                same = len({r.output[:2] for r in by[1] + by[2]}) == 1
            if not same and complete:
                self.failed.append(f"{case}: outputs differ between runs")
            w1, w2 = med(1, "wall"), med(2, "wall")
            lines.append(
                f"| {case} | {w1:.1f} / {w2:.1f} | {w1 / w2:.2f}x | {med(1, 'cpu'):.1f} / "
                f"{med(2, 'cpu'):.1f} | {n / w1:,.0f} / {n / w2 / 2:,.0f} | "
                f"{n / med(1, 'cpu'):,.0f} / {n / med(2, 'cpu'):,.0f} | "
                f"{med(1, 'peak_rss') / MiB:,.0f} / {med(2, 'peak_rss') / MiB:,.0f} | "
                f"{'same' if same else 'DIFFER'}: {what} |"
            )
        lines += [""] + [f"- check FAILED: {f}" for f in self.failed]
        return "\n".join(lines) + "\n"


def _order(text: str) -> list[int]:
    order = [int(x) for x in text.split(",") if x.strip()]
    if not order or min(order) < 1:
        raise argparse.ArgumentTypeError("--order takes counts of at least 1, like 1,2,2,1")
    return order


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--job-service"]:
        return job_service_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--order", type=_order, default=[1, 2, 2, 1], help="SDK workers per run")
    ap.add_argument("--max-chunk-bytes", type=int, default=bs.DEFAULT_MAX_CHUNK_BYTES)
    ap.add_argument("--no-merge", action="store_true", help="the dry runs only")
    ap.add_argument("--stock-job-service", action="store_true", help="Beam's own job service")
    ap.add_argument("--workdir", help="work folder (default: a temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder and outputs")
    args = ap.parse_args(argv)
    args._command = " ".join(shlex.quote(x) for x in argv)
    if sys.platform.startswith("linux"):  # the pool's orphaned workers come to us to reap
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    made = args.workdir is None
    work = Path(args.workdir or tempfile.mkdtemp(prefix="mmirage-workers-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    started = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    load_start = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    bench = Bench(args, work)
    bench.started, bench.load_start = started, load_start
    previous = signal.signal(signal.SIGTERM, bs._on_sigterm)
    try:
        rows = work / "rows.jsonl"
        bs.make_text_rows(args.rows, rows)
        bench.dry_runs(rows)
        if not args.no_merge:
            bench.merges(rows)
        text = bench.report(started, load_start)
        (work / "bench_workers.md").write_text(text, encoding="utf-8")
        print()
        print(text)
        if bench.failed:
            print("CHECKS FAILED: " + "; ".join(bench.failed), file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        print("\ninterrupted: stopping what the benchmark started", file=sys.stderr)
        return 130
    finally:
        for proc in list(bs._LIVE):
            bs._stop(proc)
        signal.signal(signal.SIGTERM, previous)
        if made and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
