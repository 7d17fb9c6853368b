"""The same run, byte for byte, on a real Spark standalone cluster: a master and two
workers (separate JVMs, one core each) with Beam's Spark job server, started by
``mmirage_beam.engines.spark``.

The lifecycle (dry run, submission, ``check``, ``merge``; ``tests/lifecycle.py``) gives
the DirectRunner's merged, errors, invalid-rows and export files and the same receipts,
and the fake sees each custom_id created once. The pipelines' stateful chunker (bag and
combining state, a watermark timer), side inputs, Reshuffle, GroupByKey, CoGroupByKey
and Flatten all run on Beam's batch Spark translation.

Runs only with ``MMIRAGE_ENGINE_CAMPAIGN=1`` (a Spark lifecycle takes minutes). Spark
(PyPI's ``pyspark`` sdist, its jars) and the job server (Maven) are fetched into the
engine cache on first use; without Java or Maven the test skips, unless
``MMIRAGE_REQUIRE_PORTABLE=1`` makes that a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mmirage_beam.engines.cluster import stop_cluster
from mmirage_beam.engines.processes import EngineError
from tests.lifecycle import (
    PLUGIN_SITE,
    TRACER_WORKER_KEY,
    WORKER_KEY,
    launcher_dir,
    lifecycle,
)
from tests.runners import REQUIRE_ENV_VAR, worker_env

pytestmark = [
    pytest.mark.timeout(1800),
    pytest.mark.skipif(
        os.environ.get("MMIRAGE_ENGINE_CAMPAIGN") != "1",
        reason="the Spark engine runs with MMIRAGE_ENGINE_CAMPAIGN=1",
    ),
]


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    """A Spark cluster for the module: master, 2 workers (1 core each), job server, with
    the workers' own keys and the tracer plugin. Stopped at the end; every process must
    be gone."""
    from mmirage_beam.engines.spark import start_spark

    root = tmp_path_factory.mktemp("spark")
    (root / "tracer_key").write_text(TRACER_WORKER_KEY + "\n", encoding="utf-8")
    env = worker_env(
        {
            "OPENAI_API_KEY": WORKER_KEY,
            "ANTHROPIC_API_KEY": WORKER_KEY,
            "TRACER_API_KEY_FILE": str(root / "tracer_key"),
            "MMIRAGE_TRACE_FILE": str(root / "trace.jsonl"),
        },
        pythonpath=[PLUGIN_SITE],
    )
    try:
        state = start_spark(root / "cluster", workers=2, cores=1, env=env)
    except EngineError as exc:
        if os.environ.get(REQUIRE_ENV_VAR) == "1":
            raise
        pytest.skip(f"Spark cannot be fetched or started here: {exc}")
    yield state
    stop_cluster(Path(state.dir))
    assert not any(d.alive() for d in state.daemons)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The lifecycle on the in-memory DirectRunner, in this process."""
    root = launcher_dir(tmp_path_factory.mktemp("direct") / "launch")
    return lifecycle(root, [], in_process=True)


def test_spark_gives_the_directrunner_files(spark, reference, tmp_path):
    got = lifecycle(
        launcher_dir(tmp_path / "launch"),
        spark.flags,
        quiet_dirs=[Path(spark.dir) / "master", Path(spark.dir) / "job-server"],
    )
    print(f"spark: {got['timings']}")
    for what in ("export", "merged", "errors", "invalid_rows", "receipts"):
        assert got[what] == reference[what], f"spark: {what} differs from the DirectRunner's"
