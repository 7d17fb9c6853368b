"""Scaling on a real Flink cluster: the dry run and the merge of N rows with 1 and 2
TaskManagers (one slot each), interleaved.

Usage:
    python benchmarks/bench_engines.py [--rows 1000000] [--order 1,2,2,1]
        [--max-chunk-bytes B] [--no-merge] [--workdir DIR] [--keep] [extra Beam options]

For N rows (GSM8K cycled, as ``bench_scale.py`` makes them), up front: the dry run on
the DirectRunner (in memory), one submission to the embedded fake provider on the
DirectRunner (untimed), ``mmirage check --watch`` until it is done, and the merge of that
run on the DirectRunner; the DirectRunner's dry run and merge give the reference outputs
(their wall, CPU and peak RSS are in the report, for scale). Then, for every TaskManager
count of ``--order`` (default 1,2,2,1: interleaved), first every dry run, then every
merge, each case on a fresh local Flink 1.19 cluster
(``mmirage_beam.engines.flink.start_flink``: a JobManager, that many TaskManagers with one
slot each, Beam's Flink job server; each its own JVM and process group; PROCESS SDK
workers started by each TaskManager, in its group), stopped after the case (and checked
gone); its logs are kept in ``<workdir>/logs/<case>/``:

1. ``dry run``: ``mmirage run --export-prompts`` with the cluster's runner flags
   (``--parallelism`` = TaskManagers).
2. ``merge``: ``mmirage merge`` of the submitted run with the cluster's runner flags.

The cluster's start is not timed (its seconds are reported). Measured per case, as
``bench_workers.py`` measures (its :func:`bench_workers.run_launcher`): the launcher's
wall time; CPU seconds (user + system) of the launcher and its children plus every process
of every cluster process group (JobManager, TaskManagers with their SDK workers, job
server: the JVMs included), read from ``/proc`` before and after (an SDK worker that ended
counts in its TaskManager's reaped-children time); peak RSS of all of them summed (every
50 ms). Outputs are compared with the DirectRunner's: the export's request lines and the
placeholder rows as multisets, the merged file by sha256.

Where the time goes, from the engine's own records, read after each job and before the
cluster stops: Flink's REST API (``/jobs/overview``, ``/jobs/<jid>``: the job's
timestamps and duration, each vertex's duration and name), the JobManager's log (``Received
JobGraph submission``: the seconds from the launcher's start until Flink had the job), the
job server's log (``Staging artifacts``: when the launcher's job reached it; its
timestamps have 1-second resolution) and the TaskManagers' logs (the job's jars fetched
from the BlobServer, one ``Logging handler created`` line per SDK worker started).

Extra arguments are Beam options added to the Flink cases' runner flags (for example
``--environment_cache_millis=60000``). Prints a Markdown report (also
``<workdir>/bench_engines.md``, after each case too); exits 1 when an output differs from
the DirectRunner's or a cluster process outlived its cluster.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_scale as bs  # noqa: E402  (inputs, configs, the fake provider, digests)
import bench_workers as bw  # noqa: E402  (the cases, process-group CPU, the launcher's measure)

MiB = bs.MiB
TOP_VERTICES = 3
_LOG4J_TIME = "%Y-%m-%d %H:%M:%S,%f"  # Flink's log lines start with this
_JUL_TIME = re.compile(r"^([A-Z][a-z]{2} \d\d, \d{4} \d\d?:\d\d:\d\d [AP]M) ")  # the job server's
_SDK_WORKER_STARTED = "Logging handler created"  # an SDK worker's first line, in its TM's log
_JAR_FETCHED = "org.apache.flink.runtime.blob.BlobClient"  # "... - Downloading <job>/p-..."


# --------------------------------------------------------------------------- the engine's records


def _log4j_times(path: Path, needle: str) -> list[float]:
    """Epoch seconds of the lines of a Flink log that hold ``needle``."""
    out = []
    for line in _lines(path):
        if needle in line:
            try:
                out.append(_dt.datetime.strptime(line[:23], _LOG4J_TIME).timestamp())
            except ValueError:
                pass
    return out


def _jul_times(path: Path, needle: str) -> list[float]:
    """Epoch seconds (whole seconds) of the messages of a java.util.logging log (the job
    server's: a time line, then the message) that hold ``needle``."""
    out, last = [], None
    for line in _lines(path):
        m = _JUL_TIME.match(line)
        if m:
            try:
                last = _dt.datetime.strptime(m.group(1), "%b %d, %Y %I:%M:%S %p").timestamp()
            except ValueError:
                last = None
        elif needle in line and last is not None:
            out.append(last)
    return out


def _lines(path: Path) -> Iterator[str]:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            yield from f
    except OSError:
        return


def _vertex_label(name: str) -> str:
    """The Beam transform of a Flink vertex name (``CHAIN MapPartition (MapPartition at
    [2]ReadDatasets/...) -> FlatMap (...)`` -> ``[2]ReadDatasets/...``), shortened."""
    m = re.search(r" at (.+?)\)(?: ->|$)", name)
    label = (m.group(1) if m else name).replace("|", "/").replace("`", "'")
    return label if len(label) <= 60 else label[:57] + "..."


def flink_records(state: Any, started: float, wall: float) -> dict:
    """What the cluster recorded of the case's job(s): REST timestamps, durations and
    vertices, the JobManager's and job server's submission times, each TaskManager's jar
    fetches and SDK worker starts. Times are epoch seconds; a missing record is None."""
    from mmirage_beam.engines.processes import get_json

    rest = f"http://127.0.0.1:{state.ports['rest']}"
    logs = Path(state.dir) / "logs"
    jobs = []
    for job in (get_json(f"{rest}/jobs/overview") or {}).get("jobs", []):
        jobs.append(get_json(f"{rest}/jobs/{job['jid']}") or job)
    received = _log4j_times(logs / "jobmanager.log", "Received JobGraph submission")
    received += [j["start-time"] / 1000 for j in jobs if not received and j.get("start-time")]
    staged = _jul_times(logs / "job-server.log", "Staging artifacts for")
    running = [j.get("timestamps", {}).get("RUNNING", 0) / 1000 for j in jobs]
    ended = [j["end-time"] / 1000 for j in jobs if j.get("end-time", -1) > 0]
    vertices = sorted(
        (
            (v.get("duration", 0) / 1000, _vertex_label(v.get("name", "?")))
            for j in jobs
            for v in j.get("vertices", [])
            if " at " in v.get("name", "")  # a Beam transform's (not a bare sink or source)
        ),
        reverse=True,
    )
    tms = []
    for d in state.daemons:
        if d.name.startswith("taskmanager-"):
            fetched = _log4j_times(Path(d.log), _JAR_FETCHED)
            tms.append(
                {
                    "jars": len(fetched),
                    "jar_secs": (max(fetched) - min(fetched)) if fetched else 0.0,
                    "sdk_starts": len(_log4j_times(Path(d.log), _SDK_WORKER_STARTED)),
                }
            )

    def first(times: list[float]) -> Optional[float]:
        return min(times) if times else None

    return {
        "jobs": [(j.get("jid", "?"), j.get("state", "?")) for j in jobs],
        "started": started,
        "staged": first([t for t in staged if t >= started - 1]),
        "received": first([t for t in received if t >= started - 1]),
        "running": first([t for t in running if t > 0]),
        "ended": max(ended) if ended else None,
        "exited": started + wall,
        "duration": sum(j.get("duration", 0) for j in jobs) / 1000,
        "vertices": vertices,
        "taskmanagers": tms,
    }


def _gap(rec: dict, a: str, b: str) -> Optional[float]:
    return rec[b] - rec[a] if rec.get(a) is not None and rec.get(b) is not None else None


# --------------------------------------------------------------------------- the benchmark


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        self.runs: list[bw.Run] = []
        self.reference: dict[str, bw.Run] = {}
        self.failed: list[str] = []
        self.started = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
        self.load_start = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        self.env = dict(os.environ, OPENAI_API_KEY=bs.FAKE_KEY)

    def log(self, msg: str) -> None:
        print(f"[engines {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def direct(self, case: str, folder: Path, cmd: list[str], output: Callable) -> None:
        """The DirectRunner's run of ``case`` (in memory): the reference outputs."""
        load0 = os.getloadavg()[0]
        m = bs.measure(cmd, folder, env=self.env, label=f"{case}, DirectRunner")
        run = bw.Run(wall=m.wall, cpu=m.cpu, peak_rss=m.peak_rss, output=output(folder))
        run.load = (load0, os.getloadavg()[0])
        self.reference[case] = run
        self.log(
            f"{case:<8} DirectRunner     wall {m.wall:7.1f} s  CPU {m.cpu:7.1f} s  "
            f"peak RSS {m.peak_rss / MiB:,.0f} MiB (the reference)"
        )
        if not self.args.keep:
            bs._rm(folder)

    def case(self, case: str, tms: int, i: int, cmd_of: Callable, output: Callable) -> None:
        """One measured case on a fresh cluster of ``tms`` TaskManagers."""
        from mmirage_beam.engines.cluster import stop_cluster
        from mmirage_beam.engines.flink import start_flink

        name = f"{case.replace(' ', '-')}-{i}-tm{tms}"
        folder = self.work / name
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        state = start_flink(
            folder / "cluster", taskmanagers=tms, slots=1, env=bw.service_env(), say=self.log
        )
        leaders = {d.pid: d.name for d in state.daemons}
        try:
            cluster_start = time.perf_counter() - t0
            cmd = cmd_of(folder, [*state.flags, *self.args.beam_args])
            label = f"{case}, {tms} TaskManager(s) (cluster logs: {state.dir}/logs)"
            run = bw.run_launcher(cmd, folder, lambda: bw._groups(leaders), label)
            run.flink = flink_records(state, run.started, run.wall)
        finally:
            stop_cluster(Path(state.dir), state=state)
            left = _left_running(leaders)
            if left:
                self.failed.append(f"{name}: cluster processes left running: {left}")
        run.case, run.tms, run.index, run.cluster_start = case, tms, i, cluster_start
        run.output = output(folder)
        self._account(run, state)
        ref = self.reference[case].output
        run.same = run.output[:2] == ref[:2] if case == "dry run" else run.output == ref
        if not run.same:
            self.failed.append(f"{case} #{i + 1} ({tms} TaskManagers): output differs")
        self.runs.append(run)
        (self.work / "bench_engines.md").write_text(self.report(complete=False), encoding="utf-8")
        kept = self.work / "logs" / name
        shutil.copytree(Path(state.dir) / "logs", kept, dirs_exist_ok=True)
        if not self.args.keep:
            bs._rm(folder)
        rec = run.flink
        self.log(
            f"{case:<8} {tms} TaskManager(s)  wall {run.wall:7.1f} s  CPU {run.cpu:7.1f} s "
            f"(JVMs {run.jvm_cpu:.1f}, SDK workers {sum(run.sdk_cpu):.1f})  peak RSS "
            f"{run.peak_rss / MiB:,.0f} MiB  Flink job {rec['duration']:.1f} s, received "
            f"{_fmt(_gap(rec, 'started', 'received'))} s after the launch  output "
            f"{'same' if run.same else 'DIFFERENT'}; cluster logs kept in {kept}"
        )

    def _account(self, run: bw.Run, state: Any) -> None:
        """Split the case's CPU seconds: launcher, each daemon's JVM, SDK workers per TM."""
        before, after, seen = run.before, run.after, run.seen
        run.daemon_cpu, run.sdk_cpu, run.sdk_procs = {}, [], []
        for d in state.daemons:
            group = bw.cpu_seconds(before, after, [p for p in after if after[p].pgid == d.pid])
            own = (
                (after[d.pid].own - before.get(d.pid, bw._NONE).own) / bw.CLK_TCK
                if d.pid in after
                else group
            )
            run.daemon_cpu[d.name] = own
            if d.name.startswith("taskmanager-"):
                run.sdk_cpu.append(group - own)
                run.sdk_procs.append(len([p for p in seen if seen[p].pgid == d.pid != p]))
        run.jvm_cpu = sum(run.daemon_cpu.values())
        run.cpu = run.launcher_cpu + run.jvm_cpu + sum(run.sdk_cpu)

    def run_all(self, rows: Path) -> None:
        a = self.args
        direct = self.work / "direct-dry-run"
        direct.mkdir(parents=True, exist_ok=True)
        self.direct(
            "dry run",
            direct,
            bw.dry_run_command(direct, rows, a.max_chunk_bytes, []),
            bw.dry_run_output,
        )
        live = self.work / "live"
        if not a.no_merge:
            live.mkdir(parents=True, exist_ok=True)
        fake = None if a.no_merge else bs.Fake(live / "fake.log")
        try:
            if fake is not None:
                self.log("submitting to the fake provider (DirectRunner, untimed)")

                def submit(cmd: list[str]) -> None:
                    bs.measure(cmd, live, env=self.env, label="submit, DirectRunner")

                cfg = bw.submit_to_fake(live, rows, a.max_chunk_bytes, fake, submit)
                direct = self.work / "direct-merge"
                direct.mkdir(parents=True, exist_ok=True)
                self.direct("merge", direct, bw.merge_command(direct, cfg, []), bw.merge_output)

            def dry_cmd(folder: Path, flags: list[str]) -> list[str]:
                return bw.dry_run_command(folder, rows, a.max_chunk_bytes, flags)

            for i, tms in enumerate(a.order):
                self.case("dry run", tms, i, dry_cmd, bw.dry_run_output)
            if fake is not None:

                def merge_cmd(folder: Path, flags: list[str]) -> list[str]:
                    return bw.merge_command(folder, cfg, flags)

                for i, tms in enumerate(a.order):
                    self.case("merge", tms, i, merge_cmd, bw.merge_output)
        finally:
            if fake is not None:
                fake.stop()

    # ----------------------------------------------------------------------- the report

    def report(self, complete: bool = True) -> str:
        """The Markdown report of the runs so far (``complete``: all of them)."""
        a, n = self.args, self.args.rows
        from mmirage_beam.engines import flink, provision, versions

        jars = sorted((provision.flink_job_server_classpath() / "lib").glob("*.jar"))
        jar_mb = sum(j.stat().st_size for j in jars) / 1e6
        conf = flink._FLINK_SETTINGS
        lines = [
            "## mmirage-beam on a real Flink cluster: 1 and 2 TaskManagers (one slot each)"
            + ("" if complete else " (in progress)"),
            "",
            f"- date: {self.started} (UTC); `python benchmarks/bench_engines.py {a._command}`",
            bw.machine_line(self.load_start),
            f"- Python {platform.python_version()}, Apache Beam SDK {versions.beam_sdk_version()}"
            f" (launcher and SDK workers), Beam's Flink job server "
            f"{versions.BEAM_JOB_SERVER_VERSION} (FlinkJobServerDriver on the classpath of "
            f"beam-runners-flink-{versions.FLINK_RUNNER_FLINK}: {len(jars)} jars, "
            f"{jar_mb:,.0f} MB), Flink {versions.FLINK_VERSION}, {_java_version()}; "
            f"mmirage-beam {bs._git_rev()}",
            "- each case on a fresh cluster (its start not timed): JobManager "
            f"({conf['jobmanager.memory.process.size']}), N TaskManagers "
            f"({conf['taskmanager.memory.process.size']}, 1 slot each), Beam's Flink job "
            "server, each its own JVM and process group; PortableRunner, PROCESS environment "
            "(each TaskManager starts its SDK workers), --parallelism N"
            + (f"; extra options {' '.join(a.beam_args)}" if a.beam_args else ""),
            bw.inputs_line(n, a.max_chunk_bytes)
            + "; reference: the same dry run and merge on the DirectRunner (in memory)",
            "- CPU s = user + sys of the launcher (and children) + every process of the "
            "cluster's groups: the JVMs (JobManager, TaskManagers, job server) and the SDK "
            "workers (each TaskManager's reaped children and live ones); peak RSS = the "
            "largest sum over all of them, every 50 ms; idle = the cluster's before the launch",
            "",
            "| case | TaskManagers | run | cluster start s | wall s | CPU s | launcher / "
            "JVMs (job server + JobManager + TaskManagers) / SDK workers CPU s | SDK workers "
            "started per TaskManager (their CPU s) | peak RSS MiB (cluster idle) | rows/s "
            "| rows per CPU-s | outputs vs DirectRunner | load 1-min before -> after |",
            "|---|---|---:|---:|---:|---:|---|---|---:|---:|---:|---|---|",
        ]
        for case in ("dry run", "merge"):
            ref = self.reference.get(case)
            if ref is not None:
                lines.append(
                    f"| {case} | DirectRunner | ref | - | {ref.wall:.1f} | {ref.cpu:.1f} | "
                    f"{ref.cpu:.1f} / - / - | - | {ref.peak_rss / MiB:,.0f} | "
                    f"{n / ref.wall:,.0f} | {n / ref.cpu:,.0f} | (the reference) | "
                    f"{ref.load[0]:.2f} -> {ref.load[1]:.2f} |"
                )
            for r in (r for r in self.runs if r.case == case):
                d = r.daemon_cpu
                tms = sum(v for k, v in d.items() if k.startswith("taskmanager-"))
                jvms = (
                    f"{r.jvm_cpu:.1f} ({d.get('job-server', 0):.1f} + "
                    f"{d.get('jobmanager', 0):.1f} + {tms:.1f})"
                )
                workers = "; ".join(
                    f"TM{k + 1}: {_started(tm, seen)} ({c:.1f})"
                    for k, (tm, seen, c) in enumerate(
                        zip(r.flink["taskmanagers"], r.sdk_procs, r.sdk_cpu)
                    )
                )
                lines.append(
                    f"| {case} | {r.tms} | {r.index + 1} | {r.cluster_start:.1f} | {r.wall:.1f} "
                    f"| {r.cpu:.1f} | {r.launcher_cpu:.1f} / {jvms} / {sum(r.sdk_cpu):.1f} | "
                    f"{workers} | {r.peak_rss / MiB:,.0f} ({r.idle_rss / MiB:,.0f}) | "
                    f"{n / r.wall:,.0f} | {n / r.cpu:,.0f} | "
                    f"{'same' if r.same else 'DIFFERENT'} | {r.load[0]:.2f} -> {r.load[1]:.2f} |"
                )
        lines += self._time_table() + self._summary()
        lines += ["", *(f"- check FAILED: {f}" for f in self.failed)]
        return "\n".join(lines) + "\n"

    def _time_table(self) -> list[str]:
        lines = [
            "",
            "Where the wall time went, from Flink's REST API (job timestamps, vertices) and "
            "logs (JobManager: `Received JobGraph submission`; job server: `Staging "
            "artifacts`, 1-s resolution; TaskManagers: jars fetched from the BlobServer, "
            "one `Logging handler created` per SDK worker started). Vertices overlap in "
            "time (pipelined regions), so their durations do not add up.",
            "",
            "| case | TaskManagers | run | wall s | launch -> job server has it s | job "
            "server -> Flink has it s (translation, jar upload) | launch -> Flink has it s "
            "| Flink job s (to RUNNING + running) | job end -> launcher exit s | Flink job / "
            f"wall | jars fetched per TaskManager (s) | top {TOP_VERTICES} vertices of Beam "
            "transforms by duration (s) |",
            "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---|---|",
        ]
        for r in self.runs:
            rec = r.flink
            tm = rec["taskmanagers"]
            top = "; ".join(
                f"`{label}` {secs:.1f}" for secs, label in rec["vertices"][:TOP_VERTICES]
            )
            lines.append(
                f"| {r.case} | {r.tms} | {r.index + 1} | {r.wall:.1f} | "
                f"{_fmt(_gap(rec, 'started', 'staged'))} | "
                f"{_fmt(_gap(rec, 'staged', 'received'))} | "
                f"{_fmt(_gap(rec, 'started', 'received'))} | {rec['duration']:.1f} "
                f"({_fmt(_gap(rec, 'received', 'running'))} + "
                f"{_fmt(_gap(rec, 'running', 'ended'))}) | "
                f"{_fmt(_gap(rec, 'ended', 'exited'))} | {rec['duration'] / r.wall:.0%} | "
                + " / ".join(f"{t['jars']} ({t['jar_secs']:.1f})" for t in tm)
                + f" | {top} |"
            )
        return lines

    def _summary(self) -> list[str]:
        n = self.args.rows
        counts = sorted({r.tms for r in self.runs})
        if not counts:
            return []
        heads = " / ".join(map(str, counts))
        lines = [
            "",
            f"| case | wall s {heads} TMs | speedup vs {counts[0]} | CPU s {heads} | "
            f"rows per CPU-s {heads} | Flink job s {heads} | launch -> Flink has it s {heads} "
            f"| peak RSS MiB {heads} | DirectRunner wall s / CPU s / peak RSS MiB | outputs "
            "vs DirectRunner |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for case in ("dry run", "merge"):
            by = {c: [r for r in self.runs if r.case == case and r.tms == c] for c in counts}
            if not all(by.values()):
                continue

            def med(get: Callable[[bw.Run], Optional[float]], by: dict = by) -> list[float]:
                out = []
                for c in counts:
                    xs = [x for x in map(get, by[c]) if x is not None]
                    out.append(statistics.median(xs) if xs else float("nan"))
                return out

            def cells(xs: list[float], spec: str = ".1f") -> str:
                return " / ".join(format(x, spec) for x in xs)

            wall = med(lambda r: r.wall)
            cpu = med(lambda r: r.cpu)
            ref = self.reference[case]
            runs = [r for c in counts for r in by[c]]
            same = all(r.same for r in runs)
            first = runs[0].output
            what = (
                f"{first[0][0]:,} request lines and {first[1][0]:,} placeholder rows "
                f"(multisets); chunks {'/'.join(map(str, sorted({r.output[2] for r in runs})))}"
                f" (DirectRunner {ref.output[2]})"
                if case == "dry run"
                else f"merged file, {first[1]:,} rows (sha256)"
            )
            lines.append(
                f"| {case} | {cells(wall)} | {cells([wall[0] / w for w in wall], '.2f')}x | "
                f"{cells(cpu)} | {cells([n / c for c in cpu], ',.0f')} | "
                f"{cells(med(lambda r: r.flink['duration']))} | "
                f"{cells(med(lambda r: _gap(r.flink, 'started', 'received')))} | "
                f"{cells([x / MiB for x in med(lambda r: r.peak_rss)], ',.0f')} | "
                f"{ref.wall:.1f} / {ref.cpu:.1f} / {ref.peak_rss / MiB:,.0f} | "
                f"{'same' if same else 'DIFFERENT'}: {what} |"
            )
        return lines


def _started(tm: dict, seen: int) -> str:
    """SDK workers a TaskManager started: its log's count (and the processes the sampling
    saw, when that differs)."""
    return f"{tm['sdk_starts']}" + ("" if seen == tm["sdk_starts"] else f" [{seen} seen]")


def _left_running(pgids: Iterable[int]) -> list[int]:
    """The processes of groups ``pgids`` still running (zombies, dead but not yet reaped,
    are reaped when they are this process's children, and do not count)."""
    for pid, ticks in bw._groups(pgids).items():
        if ticks.state == "Z":
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
    return sorted(pid for pid, ticks in bw._groups(pgids).items() if ticks.state != "Z")


def _fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1f}"


def _java_version() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "Java ?"
    m = re.search(r'version "([^"]+)"', out.stderr + out.stdout)
    return f"Java {m.group(1)}" if m else "Java ?"


def main(argv: Optional[list[str]] = None) -> int:
    from mmirage_beam.engines.processes import EngineError

    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--order", type=bw._order, default=[1, 2, 2, 1], help="TaskManagers per run")
    ap.add_argument("--max-chunk-bytes", type=int, default=bs.DEFAULT_MAX_CHUNK_BYTES)
    ap.add_argument("--no-merge", action="store_true", help="the dry runs only")
    ap.add_argument("--workdir", help="work folder (default: a temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep every case's folder and outputs")
    args, args.beam_args = ap.parse_known_args(argv)
    args._command = " ".join(shlex.quote(x) for x in argv)
    made = args.workdir is None
    work = Path(args.workdir or tempfile.mkdtemp(prefix="mmirage-engines-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    bench = Bench(args, work)
    previous = signal.signal(signal.SIGTERM, bs._on_sigterm)
    try:
        rows = work / "rows.jsonl"
        bs.make_text_rows(args.rows, rows)
        bench.run_all(rows)
        text = bench.report()
        (work / "bench_engines.md").write_text(text, encoding="utf-8")
        print()
        print(text)
        if bench.failed:
            print("CHECKS FAILED: " + "; ".join(bench.failed), file=sys.stderr)
            return 1
    except EngineError as exc:
        print(f"a Flink cluster could not be started or stopped: {exc}", file=sys.stderr)
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
