"""Crash-injection suite: kill, stop and fault `mmirage run`, resume it, count the damage.

Usage:
    python benchmarks/crash_suite.py [--trials N] [--rows R] [--chunk C]
        [--providers openai,anthropic,gemini,mistral,bedrock,vertex]
        [--experiments a,b,...] [--seed S]

Every trial submits the first R rows of the bundled GSM8K sample (chunks of C requests)
to the embedded fake provider as a subprocess (`python -m pipelines.submit`), injures
that run, then resumes it (`--run-id`, the printed resume command) until it exits 0.
Afterwards it counts, from the fake's record of every request it accepted:

- duplicated requests: accepted copies beyond the first, per custom_id;
- lost rows: rows whose custom_id is in no receipt of the run (adoptions withdrawn as
  ``adoption.rejected`` do not count) after the final resume;
- unsent rows: rows whose custom_id the fake never accepted into any batch;
- and, as notes: placeholder rows not written exactly once per row, a finish-step
  resume that called the provider, exit codes or messages other than expected.

Experiments (``--experiments``; all by default):

- ``kill_random``: SIGKILL at a random moment once the first chunk is being submitted;
- ``kill_random_parallel``: the same with two worker processes submitting chunks at once
  (``--direct_running_mode multi_processing --direct_num_workers 2``), so several chunks
  of the same size can be in flight when the run dies (Anthropic's remaining window);
- ``kill_at_<step>``: SIGKILL at a write/create step (``MMIRAGE_CRASH_AT``, see
  :mod:`mmirage_beam.crashpoints`), at a random occurrence;
- ``sigint`` / ``sigterm``: a graceful stop once two receipts exist;
- ``fault_500_after_accept``: a create stored by the provider but answered 500
  (the fake's ``fail_batch_creates`` with ``created: true``);
- ``fault_timeout_after_accept``: a create whose answer comes after the client's
  ``timeout_seconds`` (a proxy holds it back);
- ``storage_vanished``: the receipts folder disappears while the run is submitting (moved
  aside, a file put in its place: writes fail like a read-only or unmounted location),
  and comes back before the resume;
- ``storage_full``: every file write is capped (RLIMIT_FSIZE in the child; writes past
  it fail with EFBIG, as on a full disk), lifted for the resume;
- ``concurrent``: two processes started together on one run id;
- ``kill_at_publishing`` / ``kill_at_consolidated`` / ``kill_at_finishing``: the finish
  steps (placeholder rows moved into ``output_dir``; a receipt file rewritten, parts not
  yet removed; the run record not yet marked finished) killed once every batch exists:
  the resume must complete the run without any call to the provider;
- ``cross_fs``: receipts (and so the staged rows) on a tmpfs (``/dev/shm``), rows on the
  main disk, SIGKILL once a cross-filesystem move published its copy but had not yet
  deleted the source (``moved_copied``); skipped where ``/dev/shm`` is not a filesystem
  of its own;
- ``portable_kill_submit``: the PortableRunner (Beam's Python job service + an external
  worker pool, ``tests/runners.py``): the SDK worker process (a child of the pool, never
  the launcher) SIGKILLs itself just after the provider accepted its 2nd batch
  (``MMIRAGE_CRASH_AT=batch_created:2`` once, ``MMIRAGE_CRASH_ONCE``); the job must end
  with a message naming the dead worker and the resume command, which is then run on
  the same runner;
- ``portable_kill_merge``: the same runner; a submitted run's merge loses its worker once
  a partition is joined (``merge_joined``); merging again must write the file a
  DirectRunner merge writes, byte for byte.

- ``flink_kill_tm_submit``: a Flink cluster started as ``mmirage cluster up`` starts it
  (JobManager, 2 TaskManager JVMs, Beam's job server; SDK workers started by each
  TaskManager): the first SDK worker to reach its 2nd ``batch_created`` kills its whole
  process group, its TaskManager and that TaskManager's workers
  (``MMIRAGE_CRASH_KILL=group``); a TaskManager is started in its place, as a supervisor
  would, and the printed resume finishes the run;
- ``flink_kill_tm_random``: ``kill -9`` of a random TaskManager's process group once a
  random 1 to 6 receipts exist; replaced; resumed;
- ``flink_kill_tm_merge``: a submitted run's merge loses a TaskManager and its workers
  once a partition is joined (``merge_joined``); replaced; merging again must write the
  file a DirectRunner merge writes, byte for byte;
- ``flink_kill_jm``: ``kill -9`` of the JobManager once 2 receipts exist; a JobManager is
  started again on the same ports (the TaskManagers register with it again) and the
  resume finishes the run.

Prints a table: experiment, provider, trials, duplicated requests, trials in which any
duplicate happened, lost rows, unsent rows. ``tests/crash`` runs a small slice in CI.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "mmirage_beam" / "examples" / "data" / "gsm8k" / "test.jsonl"
STEPS = (
    "tmp_written",
    "intent_written",
    "batch_created",
    "receipt_written",
    "consolidated",
    "publishing",
    "finishing",
)
#: Finish steps: killed there, every batch exists; the resume must not call the provider.
FINISH_STEPS = ("publishing", "consolidated", "finishing")
PORTABLE_EXPERIMENTS = ("portable_kill_submit", "portable_kill_merge")
FLINK_EXPERIMENTS = (
    "flink_kill_tm_submit",
    "flink_kill_tm_random",
    "flink_kill_tm_merge",
    "flink_kill_jm",
)
EXPERIMENTS = (
    "kill_random",
    "kill_random_parallel",
    *(f"kill_at_{s}" for s in STEPS),
    "sigint",
    "sigterm",
    "fault_500_after_accept",
    "fault_timeout_after_accept",
    "storage_vanished",
    "storage_full",
    "concurrent",
    "cross_fs",
    *PORTABLE_EXPERIMENTS,
    *FLINK_EXPERIMENTS,
)


@dataclass
class Outcome:
    """One experiment x provider: trials, duplicated requests, lost rows."""

    experiment: str
    provider: str
    trials: int = 0
    duplicates: int = 0
    lost: int = 0
    unsent: int = 0
    trials_with_duplicates: int = 0
    seconds: float = 0.0
    skipped: str = ""
    notes: list[str] = field(default_factory=list)


class Trial:
    """One injured run and its resumes, in a fresh folder, against ``fake`` (reset)."""

    def __init__(
        self,
        fake: Any,
        provider: str,
        rows: int,
        chunk: int,
        root: Path,
        meta_root: Optional[Path] = None,
    ) -> None:
        self.fake, self.provider, self.rows = fake, provider, rows
        self.dir = Path(tempfile.mkdtemp(prefix="trial-", dir=root))
        #: Beam options of the runner every run of the trial uses (default: DirectRunner).
        self.flags: tuple[str, ...] = ()
        fake.reset()
        from mmirage_beam.providers.anthropic import adapter as anthropic_batch

        anthropic_batch.CLAIMED.clear()
        data = self.dir / "rows.jsonl"
        with open(SAMPLE, encoding="utf-8") as src:
            data.write_text("".join(next(src) for _ in range(rows)), encoding="utf-8")
        if meta_root is not None:  # e.g. a tmpfs: receipts on another filesystem
            self.meta = Path(tempfile.mkdtemp(prefix="meta-", dir=meta_root))
        else:
            self.meta = self.dir / "meta"
        self.base_url = fake.base_url_for(provider)
        #: more processor keys and environment the provider's fake needs (vertex: the
        #: project, location and a gs:// staging folder of this trial's own; the GCS
        #: emulator's endpoint and credentials)
        self.keys: dict[str, Any] = getattr(fake, "processor_keys", lambda d: {})(self.dir.name)
        self.extra_env: dict[str, str] = dict(getattr(fake, "env", {}))
        self.chunk = chunk
        self.data = data
        self.run_id = "crash"

    def config(self, name: str = "config.yaml", **processor: Any) -> str:
        import yaml

        proc = {
            "type": "batch_api",
            "provider": self.provider,
            "base_url": self.base_url,
            "metadata_output_path": str(self.meta / "batch_metadata.jsonl"),
            "max_requests_per_chunk": self.chunk,
            **self.keys,
        }
        if self.provider == "bedrock":  # boto3's endpoint_url; inputs on the S3 server
            del proc["base_url"]
            proc.update(
                endpoint_url=self.base_url,
                role_arn="arn:aws:iam::123456789012:role/crash-suite",
                s3_staging_uri=f"s3://{os.environ['MMIRAGE_CRASH_S3_BUCKET']}/{self.dir.name}",
                region="us-east-1",
                min_records_per_job=1,  # the fake's minimum is lowered too (run_suite)
            )
            if "base_url" in processor:  # a proxy in front of the fake
                processor = dict(processor)
                processor["endpoint_url"] = processor.pop("base_url")
        proc.update(processor)
        cfg = {
            "processors": [proc],
            "loading_params": {
                "datasets": [
                    {"path": str(self.data), "type": "JSONL", "output_dir": str(self.dir / "o")}
                ]
            },
            "processing_params": {
                "inputs": [{"name": "question", "key": "question"}],
                "outputs": [
                    {
                        "name": "answer",
                        "type": "batch_api",
                        "output_type": "plain",
                        "prompt": "Answer concisely:\n{{ question }}",
                    }
                ],
            },
            "execution_params": {"mode": "local"},
        }
        path = self.dir / name
        path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
        return str(path)

    def cmd(self, config: str) -> list[str]:
        return [sys.executable, "-m", "pipelines.submit", "--config", config]

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ, PYTHONPATH=str(REPO), **{**self.extra_env, **extra})
        env.setdefault("OPENAI_API_KEY", "sk-crash-suite")
        env.setdefault("ANTHROPIC_API_KEY", "sk-ant-crash-suite")
        env.setdefault("GEMINI_API_KEY", "gemini-crash-suite")
        env.setdefault("MISTRAL_API_KEY", "mistral-crash-suite")
        return env

    def popen(
        self,
        config: str,
        preexec: Optional[Callable[[], None]] = None,
        extra: tuple[str, ...] = (),
        **env: str,
    ):
        return subprocess.Popen(
            self.cmd(config) + ["--run-id", self.run_id, *self.flags, *extra],
            env=self.env(**env),
            cwd=self.dir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=preexec,
        )

    def parts(self) -> list[Path]:
        return list(self.meta.glob("*.parts/*.json"))

    def intents_or_parts(self) -> int:
        return len(list(self.meta.glob("*.parts/*")))

    def wait_for(self, pred: Callable[[], bool], proc, timeout: float = 120) -> None:  # noqa: ANN001
        end = time.monotonic() + timeout
        while time.monotonic() < end and proc.poll() is None and not pred():
            time.sleep(0.02)

    def resume(self, config: str, attempts: int = 3) -> tuple[int, str]:
        code, err = -1, ""
        for _ in range(attempts):
            done = subprocess.run(
                self.cmd(config) + ["--run-id", self.run_id, *self.flags],
                env=self.env(),
                cwd=self.dir,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                timeout=600,
            )
            code, err = done.returncode, done.stderr
            if code == 0:
                break
        return code, err

    def merge(self, config: str, out: Path) -> tuple[int, str]:
        """``mmirage merge`` of the trial's run into ``out`` on the trial's runner."""
        done = subprocess.run(
            [sys.executable, "-m", "pipelines.merge", "--config", config, "--output-path"]
            + [str(out), *self.flags],
            env=self.env(),
            cwd=self.dir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=600,
        )
        return done.returncode, done.stderr

    def placeholder_problem(self) -> Optional[str]:
        """None when the output folder holds one placeholder row per row, else what is
        wrong."""
        import json

        files = sorted((self.dir / "o" / "shard_0").glob(f"placeholders.{self.run_id}-*.jsonl"))
        ids = [
            json.loads(line)["answer"]
            for f in files
            for line in f.read_text(encoding="utf-8").splitlines()
        ]
        want = {f"__BATCH_SUBMITTED__:answer-text-{i}" for i in range(self.rows)}
        if len(ids) != self.rows or set(ids) != want:
            return f"{len(ids)} placeholder row(s) ({len(set(ids))} distinct) for {self.rows} rows"
        return None

    def count(self) -> tuple[int, int, int]:
        """(duplicated requests, lost rows, unsent rows)."""
        from mmirage_beam.providers.bedrock.requests import custom_id_of
        from mmirage_beam.run.receipts import MODALITIES, adoption_rejected, read_receipts

        def cid(r: dict) -> str:  # Bedrock's fake records the escaped recordId
            return str(
                custom_id_of(r["custom_id"]) if self.provider == "bedrock" else r["custom_id"]
            )

        sent = collections.Counter(
            cid(r)
            for r in self.fake.submitted_requests()
            if r["provider"] == self.provider and cid(r).startswith("answer-")
        )
        duplicates = sum(n - 1 for n in sent.values())
        receipted: set[str] = set()
        base = str(self.meta / "batch_metadata")
        for m in MODALITIES:
            for r in read_receipts(f"{base}.{m}.{self.run_id}.jsonl"):
                if not adoption_rejected(r):
                    receipted.update(r["custom_id_to_source_index"])
        lost = sum(1 for i in range(self.rows) if f"answer-text-{i}" not in receipted)
        unsent = sum(1 for i in range(self.rows) if f"answer-text-{i}" not in sent)
        return duplicates, lost, unsent

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.meta, ignore_errors=True)


SHM = Path("/dev/shm")


def tmpfs_root(root: Path) -> Optional[Path]:
    """``/dev/shm`` when it is a writable filesystem other than ``root``'s, else None."""
    try:
        if os.access(SHM, os.W_OK) and os.stat(SHM).st_dev != os.stat(root).st_dev:
            return SHM
    except OSError:
        pass
    return None


class Portable:
    """Beam's job service + an external worker pool for the portable experiments, started
    on first use, with the crash hook armed per trial: the pool's workers inherit
    ``MMIRAGE_CRASH_AT=batch_created:2,merge_joined:1`` and ``MMIRAGE_CRASH_ONCE``, and a
    step fires only while its ``<once>.<step>`` file is absent (:meth:`arm` removes it,
    :meth:`disarm` creates it)."""

    STEPS = ("batch_created", "merge_joined")

    def __init__(self, root: Path) -> None:
        self.root = root
        self.once = root / "crashed"
        self.services: Any = None
        self.error = ""

    def start(self) -> bool:
        if self.services is not None or self.error:
            return self.services is not None
        sys.path.insert(0, str(REPO))
        from tests.runners import PortableServices, ServiceStartError, worker_env

        env = worker_env(
            {
                # every provider's key: the workers submit, and a worker without the
                # key refuses the run before sending (all rows unsent, counted as lost)
                "OPENAI_API_KEY": "sk-crash-suite",
                "ANTHROPIC_API_KEY": "sk-ant-crash-suite",
                "GEMINI_API_KEY": "gemini-crash-suite",
                "MISTRAL_API_KEY": "mistral-crash-suite",
                "MMIRAGE_CRASH_AT": "batch_created:2,merge_joined:1",
                "MMIRAGE_CRASH_ONCE": str(self.once),
            }
        )
        try:
            self.services = PortableServices(self.root / "services", env)
            self.services.start()
        except ServiceStartError as exc:
            self.services, self.error = None, str(exc).splitlines()[0]
        return self.services is not None

    @property
    def flags(self) -> tuple[str, ...]:
        from tests.runners import runner_flags

        return tuple(runner_flags("portable_external", self.services))

    def arm(self, *steps: str) -> None:
        for step in self.STEPS:
            marker = Path(f"{self.once}.{step}")
            if step in steps:
                marker.unlink(missing_ok=True)
            else:
                marker.write_text("disarmed\n")

    def killed(self, step: str) -> Optional[tuple[int, int]]:
        """(pid, parent pid) of the process the step killed, or None (no process
        reached the armed step: its marker was never written)."""
        marker = Path(f"{self.once}.{step}")
        if not marker.exists():
            return None
        text = marker.read_text().split()
        return (int(text[0]), int(text[1])) if len(text) == 2 else None

    def stop(self) -> None:
        if self.services is not None:
            self.services.stop()
            self.services = None


class Flink:
    """A Flink cluster for the Flink experiments (``mmirage_beam.engines.flink``), started
    on first use; like :class:`Portable`, its TaskManagers' workers inherit
    ``MMIRAGE_CRASH_AT=batch_created:2,merge_joined:1``, ``MMIRAGE_CRASH_ONCE`` and
    ``MMIRAGE_CRASH_KILL=group``, and a step fires only while it is armed."""

    STEPS = Portable.STEPS

    def __init__(self, root: Path) -> None:
        self.root = root
        self.once = root / "flink-crashed"
        self.state: Any = None
        self.error = ""
        self.env: dict[str, str] = {}

    def start(self) -> bool:
        if self.state is not None or self.error:
            return self.state is not None
        sys.path.insert(0, str(REPO))
        from mmirage_beam.engines.flink import start_flink
        from mmirage_beam.engines.processes import EngineError
        from tests.runners import worker_env

        self.env = worker_env(
            {
                "OPENAI_API_KEY": "sk-crash-suite",
                "ANTHROPIC_API_KEY": "sk-ant-crash-suite",
                "GEMINI_API_KEY": "gemini-crash-suite",
                "MISTRAL_API_KEY": "mistral-crash-suite",
                "MMIRAGE_CRASH_AT": "batch_created:2,merge_joined:1",
                "MMIRAGE_CRASH_ONCE": str(self.once),
                "MMIRAGE_CRASH_KILL": "group",
            }
        )
        self.arm()
        try:
            self.state = start_flink(self.root / "flink", taskmanagers=2, env=self.env)
        except EngineError as exc:
            self.state, self.error = None, str(exc).splitlines()[0]
        return self.state is not None

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(self.state.flags)

    arm = Portable.arm
    killed = Portable.killed

    def dead(self) -> list[str]:
        return [d.name for d in self.state.daemons if not d.alive()]

    def kill(self, name: str) -> None:
        from mmirage_beam.engines.processes import kill_daemon

        kill_daemon(self.state.daemon(name))

    def heal(self) -> list[str]:
        """Start a process in place of each dead one (same name, folder and ports), as a
        supervisor would, and wait until both TaskManagers are registered. Returns the
        names of the processes replaced."""
        from mmirage_beam.engines.flink import (
            registered_taskmanagers,
            start_jobmanager,
            start_taskmanager,
        )
        from mmirage_beam.engines.processes import wait_until

        replaced = []
        for i, d in enumerate(self.state.daemons):
            if d.alive():
                continue
            if d.name == "jobmanager":
                new = start_jobmanager(self.state, self.env)
            elif d.name.startswith("taskmanager-"):
                new = start_taskmanager(self.state, int(d.name.rsplit("-", 1)[1]), self.env)
            else:
                raise RuntimeError(f"{d.name} died")
            self.state.daemons[i] = new
            replaced.append(d.name)
        self.state.save()
        wait_until(
            "2 TaskManagers registered",
            lambda: True if registered_taskmanagers(self.state) == 2 else None,
            time.monotonic() + 180,
        )
        return replaced

    def stop(self) -> None:
        if self.state is not None:
            from mmirage_beam.engines.cluster import stop_cluster

            stop_cluster(Path(self.state.dir), state=self.state)
            self.state = None


WORKER_DIED = "a worker process of the runner died"


def _check_worker_kill(portable: Portable, step: str, code: int, err: str, want: str) -> list[str]:
    notes = []
    dead = portable.killed(step)
    if dead is None:
        notes.append(f"no worker died at {step}")
    elif dead[1] != portable.services.pool.proc.pid:
        notes.append(f"the process killed at {step} ({dead[0]}) was not a worker of the pool")
    if code != 1 or WORKER_DIED not in err or want not in err:
        notes.append(f"{step}: exit {code}, message {err.strip().splitlines()[-3:]}")
    return notes


def _first_activity(trial: Trial, proc) -> None:  # noqa: ANN001
    trial.wait_for(lambda: trial.intents_or_parts() >= 1, proc)


def _finish(proc, timeout: float = 300) -> tuple[int, str]:  # noqa: ANN001
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, (err or b"").decode("utf-8", "replace")


def _flink_failed(flink: Flink, experiment: str, code: int, err: str, want: str) -> list[str]:
    """Notes unless the injured command failed with one error line naming ``want`` (the
    resume command or the merge), no traceback."""
    notes = []
    if code == 0:
        notes.append(f"{experiment}: the injured command succeeded (dead: {flink.dead()})")
    elif "Traceback" in err or want not in err or "mmirage: error:" not in err:
        notes.append(f"{experiment}: exit {code}, message {err.strip().splitlines()[-3:]}")
    return notes


def run_trial(
    experiment: str,
    trial: Trial,
    rng: random.Random,
    portable: Optional[Portable] = None,
    flink: Optional[Flink] = None,
) -> list[str]:
    """Injure one run as ``experiment`` says; returns notes (unexpected exit codes)."""
    notes: list[str] = []
    code = None
    config = trial.config()
    calls_before_resume = None
    if experiment in ("kill_random", "kill_random_parallel"):
        extra = ()
        if experiment == "kill_random_parallel":
            extra = ("--direct_running_mode=multi_processing", "--direct_num_workers=2")
        proc = trial.popen(config, extra=extra)
        _first_activity(trial, proc)
        time.sleep(rng.uniform(0.0, 1.5))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        _finish(proc)
    elif experiment.startswith("kill_at_"):
        step = experiment[len("kill_at_") :]
        nth = 1 if step in FINISH_STEPS else rng.randint(1, 4)
        proc = trial.popen(config, MMIRAGE_CRASH_AT=f"{step}:{nth}")
        code, err = _finish(proc)
        if code != -signal.SIGKILL:
            notes.append(f"{experiment}:{nth} exited {code} instead of being killed")
        if step in FINISH_STEPS:
            calls_before_resume = trial.fake.call_counts()
    elif experiment == "cross_fs":
        proc = trial.popen(config, MMIRAGE_CRASH_AT="moved_copied:1")
        code, err = _finish(proc)
        if code != -signal.SIGKILL:
            notes.append(f"{experiment} exited {code} instead of being killed")
        calls_before_resume = trial.fake.call_counts()
    elif experiment == "portable_kill_submit":
        assert portable is not None
        portable.arm("batch_created")
        trial.flags = portable.flags
        code, err = _finish(trial.popen(config))
        notes += _check_worker_kill(
            portable, "batch_created", code, err, f"--run-id {trial.run_id}"
        )
    elif experiment == "portable_kill_merge":
        assert portable is not None
        portable.arm()
        trial.flags = portable.flags
        code, err = _finish(trial.popen(config))
        if code != 0:
            notes.append(f"{experiment}: the submission exited {code}")
        portable.arm("merge_joined")
        out = trial.dir / "merged.jsonl"
        code, err = trial.merge(config, out)
        notes += _check_worker_kill(portable, "merge_joined", code, err, "mmirage merge")
        code, err = trial.merge(config, out)
        if code != 0:
            notes.append(f"{experiment}: merging again exited {code}: {err[-300:]}")
        trial.flags = ()
        reference = trial.dir / "merged-direct.jsonl"
        trial.merge(config, reference)
        if not out.exists() or out.read_bytes() != reference.read_bytes():
            notes.append(f"{experiment}: the merge rerun differs from a DirectRunner merge")
    elif experiment.startswith("flink_"):
        assert flink is not None
        notes += _flink_trial(experiment, trial, rng, flink, config)
    elif experiment in ("sigint", "sigterm"):
        proc = trial.popen(config)
        trial.wait_for(lambda: len(trial.parts()) >= 2, proc)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT if experiment == "sigint" else signal.SIGTERM)
        code, err = _finish(proc)
        if code not in (0, 130):
            notes.append(f"{experiment} exited {code}")
        elif code == 130 and "nothing will be sent twice" not in err:
            notes.append(f"{experiment}: the stop reported unrecorded chunks")
    elif experiment == "fault_500_after_accept":
        nth = rng.randint(1, 4)
        status = 529 if trial.provider == "anthropic" and rng.random() < 0.5 else 500
        trial.fake.script(fail_batch_creates={"nth": nth, "status": status, "created": True})
        code, err = _finish(trial.popen(config))
        trial.fake.script(fail_batch_creates=None)
        if code != 0:
            notes.append(f"{experiment} exited {code}")
    elif experiment == "fault_timeout_after_accept":
        sys.path.insert(0, str(REPO))
        from tests.slow_proxy import SlowProxy

        path, suffix = {
            "openai": ("/v1/batches", "/v1"),
            "anthropic": ("/v1/messages/batches", ""),
            # the default model
            "gemini": ("/v1beta/models/gemini-2.5-flash:batchGenerateContent", ""),
            "mistral": ("/mistral/v1/batch/jobs", "/mistral"),
            "bedrock": ("/model-invocation-job", ""),
            "vertex": (VertexServices.CREATE_PATH, ""),
        }[trial.provider]
        with SlowProxy(trial.fake.base_url) as proxy:
            proxy.delay("POST", path, 2.5, count=rng.randint(1, 2))
            url = proxy.base_url + suffix
            slow = trial.config("slow.yaml", base_url=url, timeout_seconds=1)
            code, err = _finish(trial.popen(slow))
        if code != 0:
            notes.append(f"{experiment} exited {code}")
    elif experiment == "storage_vanished":
        proc = trial.popen(config)
        trial.wait_for(lambda: len(trial.parts()) >= rng.randint(1, 3), proc)
        aside = trial.dir / "meta.aside"
        moved = False
        if proc.poll() is None:
            trial.meta.rename(aside)
            trial.meta.write_text("not a folder any more")
            moved = True
        code, err = _finish(proc)
        if moved:
            trial.meta.unlink()
            aside.rename(trial.meta)
        if code not in (0, 1, 2):
            notes.append(f"{experiment} exited {code}")
        if "Traceback" in err:
            notes.append(f"{experiment}: traceback")
    elif experiment == "storage_full":
        limit = rng.choice([2048, 6144, 16384])

        def cap() -> None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        code, err = _finish(trial.popen(config, preexec=cap))
        if code not in (0, 1, 2):
            notes.append(f"{experiment} ({limit} B) exited {code}")
    elif experiment == "concurrent":
        procs = [trial.popen(config) for _ in range(2)]
        codes = sorted(_finish(p)[0] for p in procs)
        if codes != [0, 2]:
            notes.append(f"{experiment} exited {codes}")
    else:
        raise ValueError(f"unknown experiment {experiment!r}")
    code, err = trial.resume(config)
    if code != 0:
        notes.append(f"{experiment}: the resume exited {code}: {err.strip().splitlines()[-1:]}")
        return notes
    if calls_before_resume is not None and trial.fake.call_counts() != calls_before_resume:
        notes.append(f"{experiment}: the resume called the provider")
    problem = trial.placeholder_problem()
    if problem:
        notes.append(f"{experiment}: {problem}")
    return notes


def _flink_trial(
    experiment: str, trial: Trial, rng: random.Random, flink: Flink, config: str
) -> list[str]:
    notes: list[str] = []
    trial.flags = flink.flags
    want = f"--run-id {trial.run_id}"
    if experiment == "flink_kill_tm_submit":
        flink.arm("batch_created")
        code, err = _finish(trial.popen(config), timeout=600)
        if flink.killed("batch_created") is None:
            notes.append(f"{experiment}: no worker reached batch_created")
        notes += _flink_failed(flink, experiment, code, err, want)
    elif experiment in ("flink_kill_tm_random", "flink_kill_jm"):
        flink.arm()
        proc = trial.popen(config)
        n = rng.randint(1, 6) if experiment == "flink_kill_tm_random" else 2
        trial.wait_for(lambda: len(trial.parts()) >= n, proc, timeout=300)
        victim = (
            f"taskmanager-{rng.randint(1, 2)}" if experiment != "flink_kill_jm" else "jobmanager"
        )
        if proc.poll() is None:
            flink.kill(victim)
            code, err = _finish(proc, timeout=600)
            notes += _flink_failed(flink, experiment, code, err, want)
        else:
            notes.append(f"{experiment}: the run ended before {n} receipts")
            _finish(proc)
    elif experiment == "flink_kill_tm_merge":
        flink.arm()
        code, err = _finish(trial.popen(config), timeout=600)
        if code != 0:
            notes.append(f"{experiment}: the submission exited {code}")
        flink.arm("merge_joined")
        out = trial.dir / "merged.jsonl"
        code, err = trial.merge(config, out)
        if flink.killed("merge_joined") is None:
            notes.append(f"{experiment}: no worker reached merge_joined")
        notes += _flink_failed(flink, experiment, code, err, "mmirage merge")
        flink.arm()
        flink.heal()
        code, err = trial.merge(config, out)
        if code != 0:
            notes.append(f"{experiment}: merging again exited {code}: {err[-300:]}")
        flags, trial.flags = trial.flags, ()
        reference = trial.dir / "merged-direct.jsonl"
        trial.merge(config, reference)
        trial.flags = flags
        if not out.exists() or out.read_bytes() != reference.read_bytes():
            notes.append(f"{experiment}: the merge rerun differs from a DirectRunner merge")
    else:
        raise ValueError(f"unknown experiment {experiment!r}")
    flink.arm()
    replaced = flink.heal()
    if experiment != "flink_kill_tm_merge" and not replaced:
        notes.append(f"{experiment}: no process of the cluster died")
    return notes


class VertexServices:
    """``provider: vertex``'s fakes for the suite, started on first use: a GCS emulator
    (its own process, ``tests/storage_servers.py``) and the fake Vertex service on it
    (``mmirage_beam/providers/vertex/fake.py``), with what :class:`Trial` asks of the
    shared fake (``base_url_for``, ``reset``, ``script``, ``submitted_requests``,
    ``call_counts``), plus the processor keys and environment a run needs."""

    PROJECT, LOCATION = "crash-suite", "us-central1"
    CREATE_PATH = f"/v1/projects/{PROJECT}/locations/{LOCATION}/batchPredictionJobs"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.gcs: Any = None
        self.fake: Any = None
        self.error = ""

    def start(self) -> bool:
        if self.fake is not None or self.error:
            return self.fake is not None
        sys.path.insert(0, str(REPO))
        from mmirage_beam.providers.vertex.fake import FakeVertexServer
        from tests.storage_servers import GCSServer, gcs_emulator_available

        self.error = gcs_emulator_available() or ""
        if self.error:
            return False
        self.gcs = GCSServer(self.root / "gcs")
        self.gcs.start()
        self.fake = FakeVertexServer(self.gcs.endpoint).start()
        return True

    @property
    def env(self) -> dict[str, str]:
        return {**self.gcs.env, "VERTEX_ACCESS_TOKEN": "vertex-crash-suite"}

    def processor_keys(self, trial: str) -> dict[str, str]:
        return {
            "project": self.PROJECT,
            "location": self.LOCATION,
            "gcs_staging_uri": self.gcs.uri(trial),
        }

    @property
    def base_url(self) -> str:
        return self.fake.base_url

    def base_url_for(self, provider: str) -> str:
        return self.fake.base_url

    def __getattr__(self, name: str) -> Any:  # reset, script, submitted_requests...
        if name in ("reset", "script", "submitted_requests", "call_counts"):
            return getattr(self.fake, name)
        raise AttributeError(name)

    def stop(self) -> None:
        if self.fake is not None:
            self.fake.stop()
        if self.gcs is not None:
            self.gcs.stop()
        self.fake = self.gcs = None


def run_suite(
    experiments: tuple[str, ...] = EXPERIMENTS,
    providers: tuple[str, ...] = ("openai", "anthropic", "gemini", "mistral"),
    trials: int = 1,
    rows: int = 120,
    chunk: int = 12,
    seed: int = 0,
    log: Callable[[str], None] = lambda s: None,
) -> list[Outcome]:
    """Run ``trials`` trials of every experiment for every provider; returns the table."""
    from mmirage_beam.testing import FakeProviderServer

    rng = random.Random(seed)
    out: list[Outcome] = []
    root = Path(tempfile.mkdtemp(prefix="mmirage-crash-"))
    portable = Portable(root)
    flink = Flink(root)
    s3 = None
    vertex = VertexServices(root)
    try:
        with FakeProviderServer() as shared:
            if "bedrock" in providers:  # its inputs and outputs live on a real S3 server
                sys.path.insert(0, str(REPO))
                from tests.storage_servers import S3Server

                s3 = S3Server(root / "s3")
                s3.start()
                os.environ.update(s3.endpoint_env, MMIRAGE_CRASH_S3_BUCKET=s3.bucket)
                shared.registered_fake("bedrock").min_records = 1
            for experiment in experiments:
                for provider in providers:
                    o = Outcome(experiment, provider)
                    out.append(o)
                    meta_root = None
                    if experiment == "cross_fs":
                        meta_root = tmpfs_root(root)
                        if meta_root is None:
                            o.skipped = "/dev/shm is not a filesystem of its own here"
                            continue
                    if experiment in PORTABLE_EXPERIMENTS and not portable.start():
                        o.skipped = f"portable services did not start: {portable.error}"
                        continue
                    if experiment in FLINK_EXPERIMENTS and not flink.start():
                        o.skipped = f"the Flink cluster did not start: {flink.error}"
                        continue
                    fake: Any = shared
                    if provider == "vertex":
                        if not vertex.start():
                            o.skipped = f"the GCS emulator is missing: {vertex.error}"
                            continue
                        fake = vertex
                    for _ in range(trials):
                        trial = Trial(fake, provider, rows, chunk, root, meta_root)
                        started = time.monotonic()
                        try:
                            o.notes += run_trial(experiment, trial, rng, portable, flink)
                            dup, lost, unsent = trial.count()
                        finally:
                            trial.cleanup()
                        o.trials += 1
                        o.duplicates += dup
                        o.lost += lost
                        o.unsent += unsent
                        o.trials_with_duplicates += bool(dup)
                        o.seconds += time.monotonic() - started
                        log(
                            f"{experiment} {provider}: duplicates {dup}, lost {lost}, "
                            f"unsent {unsent} ({time.monotonic() - started:.0f} s)"
                        )
    finally:
        portable.stop()
        flink.stop()
        if s3 is not None:
            s3.stop()
        vertex.stop()
        shutil.rmtree(root, ignore_errors=True)
    return out


def table(outcomes: list[Outcome]) -> str:
    """The outcomes as a Markdown table (and the notes under it)."""
    lines = [
        "| experiment | provider | trials | duplicated requests | trials with duplicates "
        "| lost rows | unsent rows | s/trial |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        if o.skipped:
            lines.append(f"| {o.experiment} | {o.provider} | skipped: {o.skipped} |||||||")
            continue
        per = o.seconds / o.trials if o.trials else 0.0
        lines.append(
            f"| {o.experiment} | {o.provider} | {o.trials} | {o.duplicates} | "
            f"{o.trials_with_duplicates} | {o.lost} | {o.unsent} | {per:.0f} |"
        )
    for k in dict.fromkeys(o.provider for o in outcomes):
        mine = [o for o in outcomes if o.provider == k]
        if mine:
            lines.append(
                f"| **all** | {k} | {sum(o.trials for o in mine)} | "
                f"{sum(o.duplicates for o in mine)} | "
                f"{sum(o.trials_with_duplicates for o in mine)} | {sum(o.lost for o in mine)} | "
                f"{sum(o.unsent for o in mine)} | |"
            )
    notes = [f"- {o.experiment}/{o.provider}: {n}" for o in outcomes for n in o.notes]
    return "\n".join(lines + ([""] + notes if notes else []))


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--rows", type=int, default=240)
    ap.add_argument("--chunk", type=int, default=12)
    ap.add_argument("--providers", default="openai,anthropic,gemini,mistral")
    ap.add_argument("--experiments", default=",".join(EXPERIMENTS))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    started = time.monotonic()
    outcomes = run_suite(
        tuple(args.experiments.split(",")),
        tuple(args.providers.split(",")),
        args.trials,
        args.rows,
        args.chunk,
        args.seed,
        log=lambda s: print(s, file=sys.stderr, flush=True),
    )
    print(table(outcomes))
    print(f"\n{sum(o.trials for o in outcomes)} trials in {time.monotonic() - started:.0f} s")
    return 0 if all(o.lost == 0 and o.unsent == 0 and not o.notes for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
