"""Shared fixtures: paths of the real data bundled in the repo, configs, the fake provider."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "mmirage_beam" / "examples" / "data"
GSM8K_JSONL = DATA / "gsm8k" / "test.jsonl"
GSM8K_PARQUET = DATA / "gsm8k" / "test_conversations.parquet"
GSM8K_LOADABLE = DATA / "gsm8k" / "hf_saved_conversations_300"
IMAGES = DATA / "images"
TEST_DATA = REPO / "tests" / "data"


def base_config(tmp_path: Path, provider: str = "openai", **processor: Any) -> dict[str, Any]:
    """A minimal valid config dict over the first rows of GSM8K (written by the caller)."""
    proc: dict[str, Any] = {
        "type": "batch_api",
        "provider": provider,
        "metadata_output_path": str(tmp_path / "meta" / "batch_metadata.jsonl"),
    }
    proc.update(processor)
    return {
        "processors": [proc],
        "loading_params": {
            "datasets": [
                {"path": str(GSM8K_JSONL), "type": "JSONL", "output_dir": str(tmp_path / "shards")}
            ],
            "num_shards": 1,
            "shard_id": 0,
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
            "remove_columns": True,
            "output_schema": {"question": "{{ question }}", "answer": "{{ answer }}"},
        },
        "execution_params": {"mode": "local"},
    }


def write_config(tmp_path: Path, cfg: dict[str, Any], name: str = "config.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(copy.deepcopy(cfg), sort_keys=False), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def _session_fake():
    """One embedded fake provider per test process (an xdist worker runs many files):
    starting and stopping a server for each of ~300 tests cost about 0.3 s of wall time
    each. Tests get it through ``fake_provider``, which empties it first."""
    from mmirage_beam.testing import FakeProviderServer

    with FakeProviderServer() as fake:
        yield fake


@pytest.fixture
def fake_provider(_session_fake):
    """The session's fake provider, reset: no file, batch, record, counter or script
    survives from an earlier test (:meth:`FakeProviderServer.reset`)."""
    _session_fake.reset()
    yield _session_fake
    _session_fake.reset()


@pytest.fixture
def provider_env(monkeypatch, fake_provider):
    """Keys for every built-in provider in the environment (values are test-only)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-openai")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-test")
    monkeypatch.setenv("MISTRAL_API_KEY", "test-mistral-key")
    return fake_provider


@pytest.fixture
def fast_provider_retries(monkeypatch):
    """Provider retries in this process without real waiting: the same attempts, a
    backoff of at most 4 ms instead of 0.5 s doubling to 30 s (the backoff itself is
    tested in test_retries.py). For files whose lookups fail on purpose (a 404 is
    retried 6 times: about 8 s of sleep per lookup with the real backoff)."""
    from mmirage_beam.providers.base import BatchSubmissionAdapter

    monkeypatch.setattr(BatchSubmissionAdapter, "RETRY_INITIAL_DELAY_SECS", 0.001)
    monkeypatch.setattr(BatchSubmissionAdapter, "RETRY_MAX_DELAY_SECS", 0.004)


def _memoize_beam_dofn_specs() -> None:
    """Compute Beam's ``userstate.get_dofn_specs(dofn)`` once per kind of DoFn in this
    test process, not seven times per ParDo.

    Beam calls it from ``ParDo.__init__``, both DirectRunner visitors, ``to_runner_api``
    (twice a job), ``runner_api_requires_keyed_input`` and each bundle processor; every
    call walks ``dir(dofn)`` and runs ``inspect.signature`` on ~30 methods. A cProfile
    of ``tests/transforms/test_verdicts.py`` (52 pipelines, 2,163 ParDos) put 25,232 calls at 30% of
    its time; with this, that file ran in 48 CPU-s instead of 64 (-25%). The answer
    (the state and timer specs among the methods' default arguments) depends only on
    the DoFn's class, on the wrapped callable of a
    ``beam.Map`` / ``FlatMap`` (``_process_argspec_fn``, which ``_inspect_process``
    reads; one given as ``fullargspec`` is not cached) and on bound methods stored on
    the instance, so those make the key; a key that cannot be hashed is not cached.
    The runners and every DoFn run as before; only
    this pure lookup is remembered. ``MMIRAGE_TEST_NO_SPEC_CACHE=1`` turns it off (to
    measure it). Subprocesses (the CLI tests, portable workers) are not affected.
    """
    if os.environ.get("MMIRAGE_TEST_NO_SPEC_CACHE") == "1":
        return
    import types

    from apache_beam.transforms import core, userstate

    original = userstate.get_dofn_specs
    cache: dict[Any, tuple[frozenset, frozenset]] = {}

    def get_dofn_specs(dofn):  # noqa: ANN001, ANN202
        key: Any = type(dofn)
        if isinstance(dofn, core.CallableWrapperDoFn):
            if getattr(dofn, "_fullargspec", None):  # an argspec given by hand: not cached
                return original(dofn)
            key = (key, dofn._process_argspec_fn())
        bound = tuple((k, v) for k, v in vars(dofn).items() if isinstance(v, types.MethodType))
        if bound:
            key = (key, bound)
        try:
            hit = cache.get(key)
        except TypeError:  # an unhashable callable: ask Beam every time
            return original(dofn)
        if hit is None:
            states, timers = original(dofn)
            hit = cache[key] = (frozenset(states), frozenset(timers))
        return set(hit[0]), set(hit[1])

    get_dofn_specs.__wrapped__ = original  # type: ignore[attr-defined]  (test_test_caches)
    userstate.get_dofn_specs = get_dofn_specs


def _memoize_beam_option_views() -> None:
    """Build each ``PipelineOptions.view_as(cls)`` once per options object in this test
    process.

    Every ``view_as`` call constructs ``cls(flags)``: a new argparse parser with all of
    the class's flags, parsed again. Beam's graph construction calls it for nearly every
    applied transform (``Pipeline._apply_internal``, ``_infer_result_type``, and
    ``typehints.is_consistent_with`` reading ``TypeOptions.disable_beartype``): 22,108
    times for the 52 pipelines of ``tests/transforms/test_verdicts.py``, 28% of a cProfile of it.
    A view holds nothing of its own: Beam gives it the options' shared ``_all_options``
    dict (a value set through any view is seen by all), the flags are fixed when the
    options are made, and ``_all_options`` is never replaced (``pipeline_options.py``,
    Beam 2.77), so the first view of a class answers every later call.
    ``MMIRAGE_TEST_NO_SPEC_CACHE=1`` turns this off too.
    """
    if os.environ.get("MMIRAGE_TEST_NO_SPEC_CACHE") == "1":
        return
    import weakref

    from apache_beam.options.pipeline_options import PipelineOptions

    original = PipelineOptions.view_as
    views: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def view_as(self, cls):  # noqa: ANN001, ANN202
        try:
            mine = views.setdefault(self, {})
        except TypeError:  # not weak-referenceable: as Beam does
            return original(self, cls)
        view = mine.get(cls)
        if view is None or view._all_options is not self._all_options:
            view = mine[cls] = original(self, cls)
        return view

    view_as.__wrapped__ = original  # type: ignore[attr-defined]
    PipelineOptions.view_as = view_as


def _remember_module_globals_for_objsize() -> None:
    """List the loaded modules' globals once per set of loaded modules, not at every
    ``objsize.get_deep_size``.

    Beam's SDK worker state cache weighs each value it caches (side inputs, here the
    submit's barrier and merge's plans) with ``objsize.get_deep_size``, which first
    collects ``vars(m)`` of every loaded module so that module globals are not counted;
    the test process has ~6,000 modules loaded (pytest, four provider SDKs), so each call
    walked them all: 767 calls and about 10% of a cProfile of
    ``tests/transforms/test_verdicts.py``. The list is made again whenever ``sys.modules`` holds
    other module objects than last time (compared by identity, so the answer is
    objsize's own; ``tests/unit/test_test_caches.py``). ``MMIRAGE_TEST_NO_SPEC_CACHE=1``
    turns this off too.
    """
    if os.environ.get("MMIRAGE_TEST_NO_SPEC_CACHE") == "1":
        return
    import sys

    from objsize import traverse

    original = traverse._iter_modules_globals
    remembered: list[Any] = [(), []]  # the modules listed, their globals

    def iter_modules_globals():  # noqa: ANN202
        modules = tuple(sys.modules.values())
        if modules != remembered[0]:  # a module loaded, removed or replaced (identity)
            remembered[1] = [g for m in modules for g in _globals_of(m)]
            remembered[0] = modules
        return iter(remembered[1])

    def _globals_of(module: Any) -> list[Any]:
        try:
            return [vars(module)]
        except TypeError:  # as objsize: an entry without a __dict__
            return []

    iter_modules_globals.__wrapped__ = original  # type: ignore[attr-defined]
    traverse._iter_modules_globals = iter_modules_globals


def _ctrl_c_as_in_a_terminal() -> None:
    """Let the commands the tests start get Ctrl-C as a foreground process does.

    A suite started in the background by a non-interactive shell (``.ci/run &``)
    inherits SIGINT ignored (POSIX, for asynchronous commands), and every command it
    starts would too: the tests of Ctrl-C (tests/cli/test_interrupts.py) then see it
    ignored before a job is running. A Python handler in this process is reset to the
    default in a child at exec, so the children start as from a terminal."""
    import signal
    import threading

    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    ):
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config):  # noqa: ARG001
    _memoize_beam_dofn_specs()
    _memoize_beam_option_views()
    _remember_module_globals_for_objsize()
    _ctrl_c_as_in_a_terminal()


@pytest.fixture(autouse=True)
def _model_warnings_said_anew():
    """Each test sees the model-rule warnings its own config loads give (the process says
    each once: ``config.validation._WARNED``)."""
    from mmirage_beam.config import validation

    validation._WARNED.clear()


@pytest.fixture(autouse=True)
def _no_real_keys(monkeypatch):
    for var in list(os.environ):
        if var.endswith("_API_KEY") or var.endswith("_API_KEY_FILE"):
            monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)


# The suite runs its files in xdist workers (`-n 3 --dist loadfile`), which take files in
# collection order. Alphabetical order left the longest files (the portable-runner and
# crash tests) to start late, so the run ended with one worker busy and two idle. The
# longest files go first (longest-processing-time-first scheduling); the order inside a
# file is kept. Seconds are per-file sums of `pytest --durations=0` of the whole suite
# under `-n 3` on this 2-core machine kind (2026-12-03), less what the test-time work of
# that day removed (estimated from each file run alone before and after); files not
# listed (each under ~30 s) keep their order after these.
SLOW_FILES_SECS = {
    # the engine tests: Flink clusters and their jobs (2026-12-06, run alone); first, so
    # their waits on the JVMs overlap the CPU-bound files
    "test_engines_s3.py": 600,  # the S3 lifecycle on a Flink cluster of its own
    "test_engines.py": 450,  # the rest of the Flink tests and Prism, on another worker
    "test_s3_storage.py": 120,
    "test_gcs_storage.py": 90,
    "test_crash_suite.py": 250,  # + 35 s of vertex trials (2026-12-06)
    "test_runners.py": 205,
    "test_verdicts.py": 165,
    "test_merge.py": 140,
    "test_validation.py": 115,
    "test_beam_yaml.py": 112,
    "test_scale_out.py": 95,
    "test_readers.py": 94,
    "test_reuse.py": 85,
    "test_cycle.py": 85,
    "test_merge_golden.py": 75,
    "test_check.py": 60,
    "test_vertex.py": 60,  # run alone, 2026-12-06: a GCS emulator and 18 tests
    "test_embeddings.py": 60,  # a run --wait per provider + Vertex on a GCS emulator
    "test_submit_e2e.py": 56,
    "test_credentials.py": 56,
    "test_anthropic_adoption.py": 55,
    "test_lease.py": 55,
    "test_retries.py": 55,
    "test_bench_scale.py": 54,
    "test_idempotent.py": 52,
    "test_resubmit.py": 48,
    "test_costs_e2e.py": 46,
    "test_resume.py": 45,
    "test_dry_run.py": 39,
    "test_progress.py": 39,
    "test_fuzz.py": 37,
    "test_first_use.py": 37,
    "test_check_advice.py": 34,
    "test_chunking.py": 34,
    "test_providers.py": 30,
    "test_gemini.py": 28,
    "test_staging.py": 28,
    "test_interrupts.py": 27,
    "test_finish_resume.py": 25,
    # one chromium, one fake and a few real runs and merges (2026-12-06, run alone)
    "test_ui.py": 30,
}


def pytest_collection_modifyitems(config, items):  # noqa: ARG001
    order = {id(item): n for n, item in enumerate(items)}
    items.sort(key=lambda item: (-SLOW_FILES_SECS.get(item.path.name, 0), order[id(item)]))
