"""Crash-injection suite: kill, stop and fault `mmirage run`, resume it, count the damage.

Usage:
    python benchmarks/crash_suite.py [--trials N] [--rows R] [--chunk C]
        [--providers openai,anthropic,gemini,mistral] [--experiments a,b,...] [--seed S]

Every trial submits the first R rows of the bundled GSM8K sample (chunks of C requests)
to the embedded fake provider as a subprocess (`python -m pipelines.submit`), injures
that run, then resumes it (`--run-id`, the printed resume command) until it exits 0.
Afterwards it counts, from the fake's record of every request it accepted:

- duplicated requests: accepted copies beyond the first, per custom_id;
- lost rows: rows whose custom_id is in no receipt of the run (adoptions withdrawn as
  ``adoption.rejected`` do not count) after the final resume.

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
- ``concurrent``: two processes started together on one run id.

Prints a table: experiment, provider, trials, duplicated requests, lost rows, and the
trials in which any duplicate happened. ``tests/crash`` runs a small slice in CI.
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
)


@dataclass
class Outcome:
    """One experiment x provider: trials, duplicated requests, lost rows."""

    experiment: str
    provider: str
    trials: int = 0
    duplicates: int = 0
    lost: int = 0
    trials_with_duplicates: int = 0
    notes: list[str] = field(default_factory=list)


class Trial:
    """One injured run and its resumes, in a fresh folder, against ``fake`` (reset)."""

    def __init__(self, fake: Any, provider: str, rows: int, chunk: int, root: Path) -> None:
        self.fake, self.provider, self.rows = fake, provider, rows
        self.dir = Path(tempfile.mkdtemp(prefix="trial-", dir=root))
        fake.reset()
        from mmirage_beam.providers.anthropic import adapter as anthropic_batch

        anthropic_batch.CLAIMED.clear()
        data = self.dir / "rows.jsonl"
        with open(SAMPLE, encoding="utf-8") as src:
            data.write_text("".join(next(src) for _ in range(rows)), encoding="utf-8")
        self.meta = self.dir / "meta"
        self.base_url = fake.base_url_for(provider)
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
        }
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
        env = dict(os.environ, PYTHONPATH=str(REPO), **extra)
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
            self.cmd(config) + ["--run-id", self.run_id, *extra],
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
                self.cmd(config) + ["--run-id", self.run_id],
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

    def count(self) -> tuple[int, int]:
        """(duplicated requests, lost rows)."""
        from mmirage_beam.receipts import MODALITIES, adoption_rejected, read_receipts

        sent = collections.Counter(
            r["custom_id"]
            for r in self.fake.submitted_requests(self.provider)
            if str(r["custom_id"]).startswith("answer-")
        )
        duplicates = sum(n - 1 for n in sent.values())
        receipted: set[str] = set()
        base = str(self.meta / "batch_metadata")
        for m in MODALITIES:
            for r in read_receipts(f"{base}.{m}.{self.run_id}.jsonl"):
                if not adoption_rejected(r):
                    receipted.update(r["custom_id_to_source_index"])
        lost = sum(1 for i in range(self.rows) if f"answer-text-{i}" not in receipted)
        return duplicates, lost

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def _first_activity(trial: Trial, proc) -> None:  # noqa: ANN001
    trial.wait_for(lambda: trial.intents_or_parts() >= 1, proc)


def _finish(proc, timeout: float = 300) -> tuple[int, str]:  # noqa: ANN001
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, (err or b"").decode("utf-8", "replace")


def run_trial(experiment: str, trial: Trial, rng: random.Random) -> list[str]:
    """Injure one run as ``experiment`` says; returns notes (unexpected exit codes)."""
    notes: list[str] = []
    code = None
    config = trial.config()
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
        nth = 1 if step == "consolidated" else rng.randint(1, 4)
        proc = trial.popen(config, MMIRAGE_CRASH_AT=f"{step}:{nth}")
        code, err = _finish(proc)
        if code != -signal.SIGKILL:
            notes.append(f"{experiment}:{nth} exited {code} instead of being killed")
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
    try:
        with FakeProviderServer() as fake:
            for experiment in experiments:
                for provider in providers:
                    o = Outcome(experiment, provider)
                    for _ in range(trials):
                        trial = Trial(fake, provider, rows, chunk, root)
                        try:
                            o.notes += run_trial(experiment, trial, rng)
                            dup, lost = trial.count()
                        finally:
                            trial.cleanup()
                        o.trials += 1
                        o.duplicates += dup
                        o.lost += lost
                        o.trials_with_duplicates += bool(dup)
                        log(f"{experiment} {provider}: duplicates {dup}, lost {lost}")
                    out.append(o)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def table(outcomes: list[Outcome]) -> str:
    """The outcomes as a Markdown table (and the notes under it)."""
    lines = [
        "| experiment | provider | trials | duplicated requests | trials with duplicates "
        "| lost rows |",
        "|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        lines.append(
            f"| {o.experiment} | {o.provider} | {o.trials} | {o.duplicates} | "
            f"{o.trials_with_duplicates} | {o.lost} |"
        )
    for k in dict.fromkeys(o.provider for o in outcomes):
        mine = [o for o in outcomes if o.provider == k]
        if mine:
            lines.append(
                f"| **all** | {k} | {sum(o.trials for o in mine)} | "
                f"{sum(o.duplicates for o in mine)} | "
                f"{sum(o.trials_with_duplicates for o in mine)} | {sum(o.lost for o in mine)} |"
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
    return 0 if all(o.lost == 0 and not o.notes for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
