"""Exceptions shared across mmirage-beam, each mapped to a CLI exit status."""

from __future__ import annotations


class MmirageError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class ConfigError(MmirageError, ValueError):
    """A bad config value or flag. Names the YAML key (e.g. ``processors[0].top_p``).

    Attributes:
        key: dotted path of the offending key.
        message: what is wrong and what is expected.
    """

    exit_code = 2

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}")

    def under(self, prefix: str) -> ConfigError:
        """The same error with ``prefix.`` in front of the key."""
        sep = "" if self.key.startswith("[") else "."
        return ConfigError(f"{prefix}{sep}{self.key}", self.message)


def require_int(key: str, value: object, minimum: int) -> int:
    """``value`` if it is an int (not a bool) >= ``minimum``.

    Raises:
        ConfigError: naming ``key`` otherwise.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, f"must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(key, f"must be >= {minimum}, got {value}")
    return value


class CredentialsError(MmirageError):
    """A required credential is missing from the environment (exit 2)."""

    exit_code = 2


class InvalidRowsError(MmirageError):
    """Rows failed validation; nothing was submitted (exit 1)."""

    exit_code = 1


class RequestBuildError(ValueError):
    """A row cannot become a valid request; the message names what is wrong.

    Raised by adapters' ``build_request`` and by prompt rendering; the pipeline turns it
    into a :class:`mmirage_beam.records.RowError` carrying the source_index.
    """


class PluginError(MmirageError):
    """A provider plugin named in ``$MMIRAGE_PLUGINS`` cannot be imported (exit 2)."""

    exit_code = 2


class RunStopped(MmirageError):
    """A stop was requested (Ctrl-C / SIGTERM on the launcher): no new batch is created.

    Raised by the submit DoFn on the worker when the run's stop marker exists, before it
    writes an intent or calls the provider, so the job ends with every accepted batch
    receipted.
    """

    exit_code = 130
