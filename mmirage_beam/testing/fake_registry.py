"""The fake provider's registry of provider fakes that live in their provider's package.

A provider package registers its fake by name and by the dotted path of its class
(``register_fake("bedrock", "mmirage_beam.providers.bedrock.fake:BedrockFake")``), so
registering imports nothing (no werkzeug, no SDK) and the fake's core
(:mod:`mmirage_beam.testing.fake_provider.app`) names no provider: each
:class:`~mmirage_beam.testing.fake_provider.app.FakeProviderServer` builds one handler of
every registered class over its shared store and hands it the requests it claims.

A registered class is built as ``cls(store)`` (the fake's
:class:`~mmirage_beam.testing.fake_provider.store.Store`) and has
``claims(path: str) -> bool`` (whether a request path is its) and
``handle(request: werkzeug.Request) -> werkzeug.Response``; it keeps its state in
``store.provider_state[<name>]``, which ``reset()`` empties. It may have
``demo(base_url: str, rows: int)``, a context manager yielding the processor keys of
``mmirage demo --provider <name>`` (starting whatever else the demo needs).
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, Iterable

__all__ = ["register_fake", "registered_endpoint_names", "registered_fakes"]

_FAKES: Dict[str, str] = {}
_ENDPOINTS: Dict[str, tuple[str, ...]] = {}


def register_fake(name: str, class_path: str, endpoint_names: Iterable[str] = ()) -> None:
    """Register the fake of provider ``name``: ``class_path`` is ``"module:Class"``
    (imported when a fake server starts); ``endpoint_names`` are the names its calls
    are counted under (``call_counts()``) and that ``leading_errors.paths`` may name.
    A later registration replaces it.

    Raises:
        ValueError: ``class_path`` is not ``module:Class``.
    """
    module, _, attr = class_path.partition(":")
    if not module or not attr:
        raise ValueError(f"a fake's class path is 'module:Class', got {class_path!r}")
    _FAKES[name] = class_path
    _ENDPOINTS[name] = tuple(endpoint_names)


def registered_endpoint_names() -> frozenset[str]:
    """Every endpoint name of the registered fakes."""
    return frozenset(n for names in _ENDPOINTS.values() for n in names)


def registered_fakes() -> Dict[str, Any]:
    """Provider name -> its fake's class, for every registered fake. A provider's
    package registers its fake when it is imported; this module imports no provider
    (they import it), so the caller imports them first: the fake server imports
    :mod:`mmirage_beam.providers`, which registers the built-ins'."""
    out: Dict[str, Any] = {}
    for name, path in sorted(_FAKES.items()):
        module, _, attr = path.partition(":")
        out[name] = getattr(importlib.import_module(module), attr)
    return out
