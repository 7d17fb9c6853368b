"""Test helpers: an in-memory fake of the providers' batch APIs.

``FakeProviderServer`` serves every registered provider's fake (``fake_registry``: each
provider package registers its own, ``providers/<name>/fake.py``; this package names
none of them) on one loopback port for the real SDKs;
``fake_answer_text`` and ``fake_answer_json`` compute the answers it gives, so tests can
state their expectations. See the package docstring of
:mod:`mmirage_beam.testing.fake_provider` for the endpoints, scripting keys and prompt
markers.

The names are loaded lazily so that importing ``mmirage_beam.testing`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mmirage_beam.testing.fake_provider import (
        FakeProviderServer,
        fake_answer_json,
        fake_answer_text,
    )

__all__ = ["FakeProviderServer", "fake_answer_json", "fake_answer_text"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from mmirage_beam.testing import fake_provider  # werkzeug: on first use only

        return getattr(fake_provider, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
