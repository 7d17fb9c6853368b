"""The test process's caches of Beam's graph-construction lookups (``tests/conftest.py``)
give Beam's own answers: a cache that drifted from Beam (a new Beam version, a DoFn kind
the key misses) would make in-process tests build different pipelines than users do."""

from __future__ import annotations

import os
import sys

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
    TypeOptions,
)
from apache_beam.transforms import userstate
from objsize import traverse

from mmirage_beam.transforms.chunking import _ChunkFn

pytestmark = pytest.mark.skipif(
    os.environ.get("MMIRAGE_TEST_NO_SPEC_CACHE") == "1", reason="the caches are off"
)


class _Plain(beam.DoFn):
    def process(self, element):  # noqa: ANN001, ANN201
        yield element


class _Stateful(beam.DoFn):
    SEEN = userstate.BagStateSpec("seen", beam.coders.StrUtf8Coder())

    def process(self, element, seen=beam.DoFn.StateParam(SEEN)):  # noqa: ANN001, ANN201, B008
        seen.add(element[1])
        yield element


def _stateful_fn(element, seen=beam.DoFn.StateParam(_Stateful.SEEN)):  # noqa: ANN001, ANN201, B008
    yield element


def _dofns() -> list[beam.DoFn]:
    chunker = _ChunkFn.__new__(_ChunkFn)  # the specs are the class's: no arguments needed
    return [
        _Plain(),
        _Stateful(),
        chunker,
        beam.Map(lambda x: x).fn,
        beam.ParDo(_stateful_fn).fn,  # a callable whose default is a state parameter
        beam.Map(len).fn,
    ]


@pytest.mark.parametrize("dofn", _dofns(), ids=lambda d: type(d).__name__)
def test_dofn_specs_are_beams_own_asked_twice(dofn) -> None:  # noqa: ANN001
    original = userstate.get_dofn_specs.__wrapped__
    want = original(dofn)
    assert userstate.get_dofn_specs(dofn) == want
    assert userstate.get_dofn_specs(dofn) == want  # the cached answer
    assert userstate.is_stateful_dofn(dofn) == bool(want[0] or want[1])


def test_an_option_set_through_one_view_is_seen_through_a_remembered_one() -> None:
    options = PipelineOptions(["--runner", "DirectRunner", "--direct_num_workers", "3"])
    types_view = options.view_as(TypeOptions)
    assert options.view_as(TypeOptions) is types_view  # remembered
    assert types_view.disable_beartype is False
    options.view_as(TypeOptions).disable_beartype = True
    assert types_view.disable_beartype is True
    options.view_as(StandardOptions).runner = "PortableRunner"
    fresh = PipelineOptions.view_as.__wrapped__(options, StandardOptions)
    assert options.view_as(StandardOptions).runner == fresh.runner == "PortableRunner"
    assert options.view_as(DirectOptions).direct_num_workers == 3
    other = PipelineOptions(["--direct_num_workers", "5"])
    assert other.view_as(DirectOptions).direct_num_workers == 5  # per options object


def _ids(globals_iter) -> set[int]:  # noqa: ANN001
    return {id(g) for g in globals_iter}


def _stable_globals() -> set[int]:
    """The ids of the loaded modules' globals that are the same dict at every ``vars``
    (a few entries of ``sys.modules`` are proxies that make a new dict per call: their
    ids exclude nothing, in objsize or here)."""
    out = set()
    for module in list(sys.modules.values()):
        try:
            if vars(module) is vars(module):
                out.add(id(vars(module)))
        except TypeError:
            pass
    return out


def _same_as_objsize(cached, original) -> bool:  # noqa: ANN001
    stable = _stable_globals()
    return _ids(cached()) & stable == _ids(original()) & stable == stable


def test_module_globals_are_objsizes_own_as_modules_come_and_go(tmp_path, monkeypatch) -> None:
    cached, original = traverse._iter_modules_globals, traverse._iter_modules_globals.__wrapped__
    assert _same_as_objsize(cached, original)
    (tmp_path / "mmirage_cache_probe.py").write_text("VALUE = 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import mmirage_cache_probe  # noqa: PLC0415

    try:
        assert id(vars(mmirage_cache_probe)) in _ids(cached())
        replacement = type(sys)("mmirage_cache_probe")  # same count of modules, another one
        sys.modules["mmirage_cache_probe"] = replacement
        assert id(vars(replacement)) in _ids(cached())
        assert id(vars(mmirage_cache_probe)) not in _ids(cached())
        assert _same_as_objsize(cached, original)
    finally:
        sys.modules.pop("mmirage_cache_probe", None)
