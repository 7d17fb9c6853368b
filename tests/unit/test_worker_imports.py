"""Every SDK worker imports mmirage-beam whole before its threads unpickle anything
(``mmirage_beam/worker_imports.py``, a ``--beam_plugins`` entry).

The failure it prevents was seen on a Flink TaskManager's worker: two harness threads
entered the package by two modules at once and one got a half-initialized
``mmirage_beam.providers.base``. ``test_two_threads_*`` replays that interleaving
deterministically (an import hook holds one thread at the exact point), so it fails
without the plugin and passes with it.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions

import mmirage_beam
from mmirage_beam.transforms.chunking import ChunkRequests
from mmirage_beam.worker_imports import WORKER_IMPORTS, runtime_modules

# Thread B enters the package by ``run.selection`` (its import reaches
# ``providers.config``, whose parent package ``providers`` then runs its ``__init__``),
# and is held just before that ``__init__`` imports the Anthropic adapter; thread A
# then imports ``providers.base`` directly, as an unpickled adapter reference does.
_RACE = textwrap.dedent(
    """
    import importlib, importlib.abc, importlib.machinery, sys, threading

    import apache_beam  # noqa: F401  (loaded before any bundle runs, as on a worker)
    import mmirage_beam  # noqa: F401

    for name in sys.argv[1:]:
        importlib.import_module(name)  # what sdk_worker_main does with --beam_plugins

    b_held, a_inside = threading.Event(), threading.Event()

    class Held(importlib.abc.Loader):
        # Waits while executing the module: the module's lock is held then, and the
        # global import lock (held while finders run) is not.
        def __init__(self, real, who):
            self.real, self.who = real, who

        def create_module(self, spec):
            return self.real.create_module(spec)

        def exec_module(self, module):
            if self.who == "B":
                b_held.set()
                a_inside.wait(10)
            else:
                a_inside.set()
            self.real.exec_module(module)

    GATES = {"B": "mmirage_beam.providers.anthropic", "A": "mmirage_beam.providers.base"}

    class Gate(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            who = threading.current_thread().name
            if GATES.get(who) != name:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path, target)
            spec.loader = Held(spec.loader, who)
            return spec

    sys.meta_path.insert(0, Gate())
    errors = []

    def load(module):
        try:
            importlib.import_module(module)
        except BaseException as exc:
            errors.append(f"{type(exc).__name__}: {exc}")

    b = threading.Thread(target=load, args=("mmirage_beam.run.selection",), name="B")
    a = threading.Thread(target=load, args=("mmirage_beam.providers.base",), name="A")
    b.start()
    while b.is_alive() and not b_held.wait(0.05):  # held, or never needed holding
        pass
    a.start()
    a.join(30)
    b.join(30)
    print("\\n".join(errors) or "ok")
    """
)


def _race(*plugins: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", _RACE, *plugins],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def test_two_threads_entering_the_package_by_two_modules_break_without_the_plugin() -> None:
    """The control: the interleaving seen on Flink breaks the import (a half-initialized
    module or Python's deadlock breaker), so the next test can fail."""
    out = _race()
    assert out != "ok"
    assert "resolve_credentials" in out or "_DeadlockError" in out, out


def test_two_threads_entering_the_package_by_two_modules_import_it_after_the_plugin() -> None:
    assert _race(WORKER_IMPORTS) == "ok"


def test_the_plugin_imports_every_runtime_module() -> None:
    """After the plugin, no module of the package (but the fake's and the engine
    launcher's wings) is left for a worker's threads to import; the fake provider's
    server is not imported on the way."""
    script = textwrap.dedent(
        f"""
        import importlib, sys
        import {WORKER_IMPORTS} as w
        skipped = w.import_package()
        missing = [n for n in w.runtime_modules() if n not in sys.modules]
        fakes = [n for n in ("werkzeug", "mmirage_beam.testing.fake_provider") if n in sys.modules]
        print(len(w.runtime_modules()), skipped, missing, fakes)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    count, rest = proc.stdout.split(" ", 1)
    assert int(count) > 50
    assert rest.strip() == "[] [] []"  # and the fakes' server (werkzeug) not loaded


def test_runtime_modules_leave_out_the_wings_that_never_run_on_a_worker() -> None:
    names = runtime_modules()
    assert "mmirage_beam.providers.base" in names
    assert "mmirage_beam.run.selection" in names
    never = ("mmirage_beam.testing", "mmirage_beam.engines", "mmirage_beam.ui")
    assert not [n for n in names if n.startswith(never)]
    # the fakes in their provider's folder (providers/bedrock/fake.py...) neither
    assert not [n for n in names if n.rsplit(".", 1)[-1].startswith("fake")]


def test_a_composed_pipeline_names_the_plugin_once() -> None:
    """Two public transforms in one pipeline: ``--beam_plugins`` gains the entry once and
    keeps the user's own."""
    options = PipelineOptions(["--beam_plugins", "my.plugin"])
    p = beam.Pipeline(options=options)
    reqs = p | beam.Create([])
    reqs | "A" >> ChunkRequests(1000, 10)
    reqs | "B" >> ChunkRequests(1000, 10)
    assert p.options.view_as(SetupOptions).beam_plugins == ["my.plugin", WORKER_IMPORTS]


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in mmirage_beam.__all__
        if isinstance(getattr(mmirage_beam, n), type)
        and issubclass(getattr(mmirage_beam, n), beam.PTransform)
    ],
)
def test_every_public_ptransform_asks_its_workers_to_import_the_package(name: str) -> None:
    cls = getattr(mmirage_beam, name)
    assert "import_on_workers(" in inspect.getsource(cls.expand), name
