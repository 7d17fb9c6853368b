"""The storage servers, the local reference and the Flink cluster the engine and storage
tests share, one per test module (``tests/storage_lifecycle.py`` runs the lifecycle on
them): a module that asks for ``flink`` gets a cluster of its own, so the engine tests
split over two files run on two xdist workers at once."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

import pytest

from mmirage_beam.engines.cluster import stop_cluster
from mmirage_beam.engines.flink import JAVA_OPTS_ENV
from mmirage_beam.engines.processes import EngineError
from tests import storage_lifecycle as lc
from tests.lifecycle import PLUGIN_SITE, TRACER_WORKER_KEY, WORKER_KEY
from tests.runners import start_or_skip, worker_env
from tests.storage_servers import GCSServer, S3Server, skip_unless_gcs_emulator, skip_unless_moto

#: The longer engine tests run with ``MMIRAGE_ENGINE_CAMPAIGN=1`` (README, Development);
#: CI runs the S3 lifecycle on Flink (a submit and merge compared with the DirectRunner,
#: with resubmit and cancel), both TaskManagers' work, a TaskManager kill and Prism,
#: within its 20 minutes.
CAMPAIGN = os.environ.get("MMIRAGE_ENGINE_CAMPAIGN") == "1"

#: The test clusters' JVMs compile with C1 only and collect with the serial GC: their
#: jobs are short and the machine has 2 cores, where C2's compiling cost more than it
#: gained (the S3 lifecycle on Flink, alone on an idle machine: 201 -> 175 CPU seconds,
#: 2026-12-06). A value already in the environment wins; empty turns it off.
os.environ.setdefault(JAVA_OPTS_ENV, "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
campaign = pytest.mark.skipif(
    not CAMPAIGN, reason="a longer engine test: MMIRAGE_ENGINE_CAMPAIGN=1 runs it"
)


def start_engine_or_skip(start, *args, **kwargs):  # noqa: ANN001, ANN202
    return start_or_skip(lambda: start(*args, **kwargs), (EngineError,), "the engine")


@pytest.fixture(scope="module")
def engine_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("engines")
    secrets = root / "secrets"
    secrets.mkdir()
    (secrets / "tracer_key").write_text(TRACER_WORKER_KEY + "\n", encoding="utf-8")
    return root


def engine_worker_env(root: Path) -> dict:
    """The TaskManagers' (so their SDK workers') environment: the workers' own keys, the
    S3 credentials of the moto server (any credentials do for moto; the endpoint comes in
    the pipeline options), the tracer plugin on PYTHONPATH, the trace file."""
    from tests.storage_servers import S3Server

    return worker_env(
        {
            **S3Server(root).env,
            "OPENAI_API_KEY": WORKER_KEY,
            "ANTHROPIC_API_KEY": WORKER_KEY,
            "TRACER_API_KEY_FILE": str(root / "secrets" / "tracer_key"),
            "MMIRAGE_TRACE_FILE": str(root / "trace.jsonl"),
        },
        pythonpath=[PLUGIN_SITE],
    )


#: The crash points every TaskManager of a module's cluster carries, each disarmed by its
#: ``crash.<step>`` file (``mmirage_beam/crashpoints.py``: with ``MMIRAGE_CRASH_ONCE``,
#: a worker that finds the file carries on); the TaskManager-kill test arms its step by
#: removing the file (:func:`armed`), so it kills a TaskManager of this cluster instead
#: of starting a cluster of its own.
CRASH_STEPS = ("batch_created", "intent_written", "receipt_written")


def crash_env(root: Path) -> dict[str, str]:
    """The crash-point variables of the TaskManagers' environment (:data:`CRASH_STEPS`,
    each killing the TaskManager's whole process group once armed)."""
    return {
        "MMIRAGE_CRASH_AT": ",".join(f"{step}:1" for step in CRASH_STEPS),
        "MMIRAGE_CRASH_ONCE": str(root / "crash"),
        "MMIRAGE_CRASH_KILL": "group",
    }


def disarm(root: Path) -> None:
    """Every crash point of :data:`CRASH_STEPS` found already taken."""
    for step in CRASH_STEPS:
        (root / f"crash.{step}").write_text("disarmed\n", encoding="utf-8")


@contextlib.contextmanager
def armed(root: Path, step: str) -> Iterator[Path]:
    """``step``'s crash point armed for the block (the first SDK worker to reach it kills
    its TaskManager); yields the file that worker writes; disarmed again after."""
    marker = root / f"crash.{step}"
    marker.unlink(missing_ok=True)
    try:
        yield marker
    finally:
        disarm(root)


@pytest.fixture(scope="module")
def flink(engine_root):
    """A Flink cluster for the module: JobManager, 2 TaskManagers (1 slot each), job
    server, the TaskManagers carrying disarmed crash points (:func:`armed`). Stopped at
    the end; every process must be gone."""
    from mmirage_beam.engines.flink import start_flink

    disarm(engine_root)
    env = {**engine_worker_env(engine_root), **crash_env(engine_root)}
    state = start_engine_or_skip(start_flink, engine_root / "flink", taskmanagers=2, env=env)
    state.env = env
    yield state
    stop_cluster(Path(state.dir))
    assert not any(d.alive() for d in state.daemons)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto's S3 server in its own process (the credentials: its ``env``; the endpoint:
    its ``flags``, Beam's pipeline options)."""
    skip_unless_moto()
    server = S3Server(tmp_path_factory.mktemp("moto"))
    server.start()
    yield server
    assert server.stop() == [], "moto's process group was not reaped"


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    """A GCS emulator in its own process."""
    skip_unless_gcs_emulator()
    server = GCSServer(tmp_path_factory.mktemp("gcs"))
    server.start()
    yield server
    assert server.stop() == [], "the emulator's process group was not reaped"


@pytest.fixture(scope="module")
def rows_file(tmp_path_factory) -> Path:
    """The lifecycle's rows (GSM8K with failure markers and an invalid row)."""
    return lc.write_rows(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory, rows_file) -> dict:
    """The lifecycle with every path on the local disk, on the DirectRunner: what a
    shared storage must match."""
    return lc.local_reference(tmp_path_factory.mktemp("local"), rows_file)
