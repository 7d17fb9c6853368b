"""The crash-injection suite at CI size (benchmarks/crash_suite.py runs the larger one).

Each trial is a real `mmirage run` subprocess against the embedded fake provider, killed
(SIGKILL just after the provider accepted a batch) or faulted after acceptance (stored,
answered 500), then resumed until it succeeds; the fake's record of accepted requests
gives the duplicates, the receipts the lost rows.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location(
    "crash_suite", REPO / "benchmarks" / "crash_suite.py"
)
crash_suite = importlib.util.module_from_spec(_spec)
sys.modules["crash_suite"] = crash_suite  # dataclasses look their module up there
_spec.loader.exec_module(crash_suite)

#: ``MMIRAGE_SLOW_TESTS=1`` also runs the merge worker kill on the portable runner.
SLOW = os.environ.get("MMIRAGE_SLOW_TESTS") == "1"

# Two processes on one run id are covered by tests/crash/test_lease.py; the rest of the
# experiments run in benchmarks/crash_suite.py (minutes, not seconds).
CI_EXPERIMENTS = ("kill_at_batch_created", "fault_500_after_accept")


@pytest.mark.parametrize(
    "provider,experiments",
    [
        # A stored-but-500 create is adopted, never sent twice, in whole in-process runs
        # for OpenAI and Anthropic (tests/providers/test_retries.py, test_anthropic_adoption.py)
        # and for Mistral (test_mistral.py); Gemini's in-process test is the adapter's,
        # so its whole-run trial stays here. The kill needs a subprocess for everyone.
        ("openai", ("kill_at_batch_created",)),
        ("anthropic", ("kill_at_batch_created",)),
        ("gemini", CI_EXPERIMENTS),
        ("mistral", ("kill_at_batch_created",)),
        # Bedrock: S3 on moto's server; the kill inside the acceptance window and a
        # create stored but answered 500 (its retry replays the clientRequestToken).
        ("bedrock", CI_EXPERIMENTS),
        # Vertex AI: the lost create (killed after it, or stored but answered 500) is
        # adopted by its display_name; its fake and a GCS emulator (skipped without it)
        ("vertex", CI_EXPERIMENTS),
    ],
)
def test_crashes_faults_and_concurrent_runs_lose_nothing_and_duplicate_nothing(
    provider, experiments
):
    if provider == "bedrock":
        from tests.storage_servers import skip_unless_moto

        skip_unless_moto()
    if provider == "vertex":
        from tests.storage_servers import skip_unless_gcs_emulator

        skip_unless_gcs_emulator()
    outcomes = crash_suite.run_suite(experiments, (provider,), trials=1, rows=60, chunk=6)
    print(crash_suite.table(outcomes))
    assert [o.trials for o in outcomes] == [1] * len(experiments)
    assert sum(o.lost for o in outcomes) == 0
    assert sum(o.duplicates for o in outcomes) == 0
    assert [n for o in outcomes for n in o.notes] == []


def test_the_crash_hook_names_only_known_steps():
    """Every step the suite injects is one the code checks (a typo would never fire)."""
    import pathlib

    sources = "".join(
        p.read_text(encoding="utf-8")
        for folder in ("mmirage_beam", "pipelines")
        for p in pathlib.Path(REPO, folder).rglob("*.py")
    )
    for step in crash_suite.STEPS + crash_suite.Portable.STEPS + ("adopted", "moved_copied"):
        assert f'crash_point("{step}")' in sources, step
    assert len(crash_suite.EXPERIMENTS) == len(set(crash_suite.EXPERIMENTS))


def _portable_or_skip(outcomes) -> None:  # noqa: ANN001
    from tests.runners import REQUIRE_ENV_VAR

    skipped = [o.skipped for o in outcomes if o.skipped]
    if skipped and os.environ.get(REQUIRE_ENV_VAR) != "1":
        pytest.skip(skipped[0])
    assert not skipped


@pytest.mark.parametrize(
    "experiment",
    [
        "portable_kill_submit",
        pytest.param(
            "portable_kill_merge",
            marks=pytest.mark.skipif(not SLOW, reason="set MMIRAGE_SLOW_TESTS=1 (about 2 min)"),
        ),
    ],
)
def test_a_worker_killed_on_the_portable_runner_is_named_and_its_rerun_completes(experiment):
    """The SDK worker (a child of Beam's worker pool, not the launcher) SIGKILLs itself
    after the provider accepted a batch (or after merge joined a partition): the job
    ends with the dead worker named and the command to run; the rerun on the same
    runner leaves 0 duplicates and 0 unsent rows (the merge: the DirectRunner's file)."""
    outcomes = crash_suite.run_suite((experiment,), ("openai",), trials=1, rows=40, chunk=10)
    print(crash_suite.table(outcomes))
    _portable_or_skip(outcomes)
    (o,) = outcomes
    assert (o.trials, o.duplicates, o.lost, o.unsent, o.notes) == (1, 0, 0, 0, [])
