"""Provider ``echo``: a plugin's folder written from ``docs/plugins.md`` ("A fake of your
own"), to check that a new provider's fake needs no edit outside its own folder (and
``setup.py``'s extras and the registry line): it registers its fake by class path, and
the fake (``fake.py``) builds on the shared core without the core naming it.

Importing the package registers the fake (:func:`register`), as a provider package's
``__init__`` does; ``tests/unit/test_provider_structure.py`` calls :func:`register` on a
copy of the registry so that no other test sees it.
"""

from mmirage_beam.testing.fake_registry import register_fake

PROVIDER = "echo"
#: the fake's endpoint names (``call_counts()``, ``leading_errors.paths``).
FAKE_ENDPOINT_NAMES = ("echo_jobs_create", "echo_jobs_get")


def register() -> None:
    """Registers the fake (importing nothing heavy: the class is loaded by path)."""
    register_fake(PROVIDER, f"{__name__}.fake:EchoFake", FAKE_ENDPOINT_NAMES)


register()
