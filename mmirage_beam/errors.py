"""Exceptions shared across mmirage-beam, each mapped to a CLI exit status."""

from __future__ import annotations

import unicodedata

__all__ = [
    "MmirageError",
    "ConfigError",
    "require_int",
    "CredentialsError",
    "InvalidRowsError",
    "RequestBuildError",
    "PluginError",
    "RunStopped",
]


class MmirageError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class ConfigError(MmirageError, ValueError):
    """A bad config value or flag. Names the YAML key (e.g. ``processors[0].top_p``).

    ``str(error)`` is always one line, ``key: message``: line breaks in the message (a
    YAML parser's report, a Jinja2 error) become spaces, and control or line-breaking
    characters in the key (a key of the YAML file itself) are shown escaped.

    Attributes:
        key: dotted path of the offending key, as written in the YAML.
        message: what is wrong and what is expected.
    """

    exit_code = 2

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{_escape_controls(key)}: {_one_line(message)}")

    def under(self, prefix: str) -> ConfigError:
        """The same error with ``prefix.`` in front of the key (a placeholder key such as
        ``<root>`` or ``<list>``, meaning the value as a whole, becomes ``prefix``)."""
        if self.key.startswith("<") and self.key.endswith(">"):
            return ConfigError(prefix, self.message)
        sep = "" if self.key.startswith("[") else "."
        return ConfigError(f"{prefix}{sep}{self.key}", self.message)


def _one_line(text: str) -> str:
    """``text`` with its line breaks (and the indentation after them) turned into spaces."""
    lines = [part.strip() for part in str(text).splitlines()]
    return " ".join(part for part in lines if part)


def _escape_controls(text: str) -> str:
    """``text`` with control, format and line-breaking characters escaped (``\\n``)."""
    return "".join(
        repr(c)[1:-1] if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c
        for c in str(text)
    )


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
