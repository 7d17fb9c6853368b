"""The fake provider's registry of provider fakes: every fake lives in its provider's
package and registers here, so the fake's core names no provider.

A provider package registers its fake by name and by the dotted path of its class
(``register_fake("bedrock", "mmirage_beam.providers.bedrock.fake:BedrockFake")``), so
registering imports nothing (no werkzeug, no SDK) and the fake's core
(:mod:`mmirage_beam.testing.fake_provider.app`) names no provider: each
:class:`~mmirage_beam.testing.fake_provider.app.FakeProviderServer` builds one handler of
every registered class over its shared store and hands it the requests it claims.

A registered class is built as ``cls(store)`` (the fake's
:class:`~mmirage_beam.testing.fake_provider.store.Store`) and has:

- ``claims(request: werkzeug.Request) -> bool``: whether the request is its (by path
  prefix, or by what tells it apart on a shared path: a header such as Gemini's
  ``x-goog-api-key``). The claims of the fakes must not overlap, but one fake may be
  registered with ``fallback=True``: it is asked last and takes what no other claimed.
- ``handle(request) -> werkzeug.Response``: routes, authenticates, counts the call
  (``store.call_counts``), answers scripted leading errors and answers in the
  provider's error shape (:class:`~mmirage_beam.testing.fake_provider.routing.RoutedFake`
  does all that from a table of werkzeug ``Rule`` objects).

and may have:

- ``provider_names: tuple[str, ...]``: the names ``submitted_requests(provider)``,
  ``batches(provider)`` and ``base_url_for(provider)`` accept for it (default: its
  registered name); ``base_url(root: str, provider: str) -> str``, the base URL that
  provider's SDK takes (default ``root``);
- ``labels: tuple[tuple[str, str], ...]``: ``(label, provider name)`` pairs that the
  ``mmirage fake-provider`` start-up line lists with their base URLs (a fake without
  labels gets an ``and <name>: URL`` line of its own);
- ``batch_view(batch, now) -> dict | None``: the API object of one of its batches
  (``None``: not its batch), for ``fake.batches()``;
- ``expire_results(batch, now) -> bool``: make an ended batch's results expire now
  (``False``: not its batch);
- ``demo(base_url: str, rows: int)``, a context manager yielding the processor keys of
  ``mmirage demo --provider <name>`` (starting whatever else the demo needs).

It keeps its own state in ``store.provider_state[<name>]``, which ``reset()`` empties.
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, Iterable, NamedTuple

__all__ = ["register_fake", "registered_endpoint_names", "registered_fakes"]


class _Registration(NamedTuple):
    class_path: str
    endpoint_names: tuple[str, ...]
    fallback: bool
    rank: int


_FAKES: Dict[str, _Registration] = {}
#: The package whose import registers the built-in providers' fakes (each
#: ``providers/<name>/__init__.py`` calls :func:`register_fake`), loaded by name as a
#: plugin is, so that this package imports none of the providers' code.
BUILT_INS = "mmirage_beam.providers"


def register_fake(
    name: str,
    class_path: str,
    endpoint_names: Iterable[str] = (),
    *,
    fallback: bool = False,
    rank: int = 100,
) -> None:
    """Register the fake of provider ``name``: ``class_path`` is ``"module:Class"``
    (imported when a fake server starts); ``endpoint_names`` are the names its calls
    are counted under (``call_counts()``) and that ``leading_errors.paths`` may name;
    ``fallback``: asked last, it takes the requests no other fake claims (at most one
    fake should be); ``rank``: where the fakes are listed (lowest first, then by
    name): the start-up line, ``registered_fakes()``. A later registration replaces it.

    Raises:
        ValueError: ``class_path`` is not ``module:Class``.
    """
    module, _, attr = class_path.partition(":")
    if not module or not attr:
        raise ValueError(f"a fake's class path is 'module:Class', got {class_path!r}")
    _FAKES[name] = _Registration(class_path, tuple(endpoint_names), fallback, rank)


def registered_endpoint_names() -> frozenset[str]:
    """Every endpoint name of the registered fakes."""
    return frozenset(n for reg in _FAKES.values() for n in reg.endpoint_names)


def _ordered() -> list[tuple[str, _Registration]]:
    return sorted(_FAKES.items(), key=lambda item: (item[1].rank, item[0]))


def registered_fakes() -> Dict[str, Any]:
    """Provider name -> its fake's class, for every registered fake, by rank then name.
    A provider's package registers its fake when it is imported; this module imports no
    provider's code (they import it): it loads :data:`BUILT_INS` by name, whose import
    registers the built-ins' fakes; a plugin's fake registers when its module is
    imported (``$MMIRAGE_PLUGINS``, its entry point, or the test that uses it)."""
    importlib.import_module(BUILT_INS)
    out: Dict[str, Any] = {}
    for name, reg in _ordered():
        module, _, attr = reg.class_path.partition(":")
        out[name] = getattr(importlib.import_module(module), attr)
    return out


def fallback_names() -> frozenset[str]:
    """The names of the fakes registered with ``fallback=True``."""
    return frozenset(name for name, reg in _FAKES.items() if reg.fallback)
