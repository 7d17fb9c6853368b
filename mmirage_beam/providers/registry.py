"""The one registry mechanism behind ``BatchProviderConfigRegistry`` and
``BatchAdapterRegistry`` (MMIRAGE's two plugin registries): provider name -> class."""

from __future__ import annotations

import importlib
import logging
import os
from typing import Any, ClassVar

from mmirage_beam.errors import ConfigError, PluginError

_LOG = logging.getLogger(__name__)
ENTRY_POINT_GROUP = "mmirage_beam.providers"
PLUGINS_ENV_VAR = "MMIRAGE_PLUGINS"
_plugins_loaded = False


def load_plugins() -> None:
    """Import provider plugins once, so they register themselves: every module named in
    ``$MMIRAGE_PLUGINS`` (comma-separated) and every entry point of the
    ``mmirage_beam.providers`` group (declared in a plugin package's setup).

    Raises:
        ConfigError: a named module cannot be imported (naming it).
    """
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for name in filter(None, (m.strip() for m in os.environ.get(PLUGINS_ENV_VAR, "").split(","))):
        _import_plugin(name)
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as exc:  # one broken plugin must not hide the others
            _LOG.warning("provider plugin %s (%s) failed to load: %s", ep.name, ep.value, exc)


def _import_plugin(name: str) -> None:
    """Import a ``$MMIRAGE_PLUGINS`` module: from the current directory when the module
    exists there (as ``python -m`` would; the ``mmirage`` command does not put it on
    ``sys.path`` by itself, and an installed package of the same name must not shadow
    it), else from the installed packages. A module that is not an installed package is pickled
    by value with the DoFns, so workers in other folders or machines get its classes.

    Raises:
        PluginError: it cannot be imported (naming the variable and the module).
    """
    import sys

    cwd = os.getcwd()
    if _exists_in(cwd, name):
        _prefer_folder(cwd, name)
    try:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            if cwd in sys.path or "" in sys.path:
                raise
            sys.path.append(cwd)
            module = importlib.import_module(name)
    except ImportError as exc:
        raise PluginError(
            f"${PLUGINS_ENV_VAR}: cannot import the plugin module {name!r} (looked in the "
            f"installed packages and in {cwd}): {exc}"
        ) from None
    origin = getattr(module, "__file__", None) or ""
    if origin.startswith(cwd + os.sep) and "site-packages" not in origin:
        try:  # the cloudpickle Beam itself pickles DoFns with (its default pickler)
            from apache_beam.internal.cloudpickle import cloudpickle
        except ImportError:  # pragma: no cover - an older or newer Beam layout
            return
        cloudpickle.register_pickle_by_value(sys.modules[name.split(".", 1)[0]])


def _exists_in(folder: str, name: str) -> bool:
    """Whether module ``name`` (dotted) is a file or package under ``folder``."""
    path = os.path.join(folder, *name.split("."))
    return os.path.isfile(path + ".py") or os.path.isdir(path)


def _prefer_folder(folder: str, name: str) -> None:
    """Put ``folder`` first on ``sys.path`` so a module there wins over an installed
    package of the same top-level name (some dependencies install a top-level ``tests``
    package); a same-named top-level package already imported from elsewhere is dropped
    from ``sys.modules`` with its submodules, so the import finds the folder's."""
    import sys

    if sys.path[:1] != [folder]:
        sys.path.insert(0, folder)
    importlib.invalidate_caches()
    top = name.split(".", 1)[0]
    loaded = sys.modules.get(top)
    if loaded is None:
        return
    places = list(getattr(loaded, "__path__", None) or [getattr(loaded, "__file__", "") or ""])
    if not any(os.path.abspath(p).startswith(folder + os.sep) for p in places if p):
        for mod in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
            del sys.modules[mod]


class ProviderRegistry:
    """Provider name -> a subclass of ``base_class``. Each subclass has its own table.

    Subclasses set ``base_class`` and ``unknown_message`` (formatted with ``name`` and
    ``known``) and may override :meth:`_before_get` (e.g. to import built-ins lazily).
    """

    base_class: ClassVar[type]
    unknown_message: ClassVar[str]
    _registry: ClassVar[dict[str, type]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._registry = {}

    @classmethod
    def register(cls, name: str, klass: type) -> None:
        """Register ``klass`` for ``provider: name`` (a later registration replaces it).

        Raises:
            TypeError: if ``klass`` is not a subclass of ``base_class``.
        """
        if not (isinstance(klass, type) and issubclass(klass, cls.base_class)):
            raise TypeError(f"{klass!r} is not a {cls.base_class.__name__} subclass")
        cls._registry[name] = klass

    @classmethod
    def get(cls, name: str) -> Any:
        """Return the class registered for ``name``.

        Raises:
            ConfigError: on key ``provider``, listing the registered names, if unknown.
        """
        cls._before_get()
        try:
            return cls._registry[name]
        except KeyError:
            import difflib

            known = ", ".join(sorted(cls._registry)) or "none"
            close = (
                difflib.get_close_matches(name, sorted(cls._registry), n=1, cutoff=0.6)
                if isinstance(name, str)
                else []
            )
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                "provider", cls.unknown_message.format(name=name, known=known) + hint
            ) from None

    @classmethod
    def names(cls) -> list[str]:
        """The registered provider names, sorted."""
        cls._before_get()
        return sorted(cls._registry)

    @classmethod
    def _before_get(cls) -> None:
        """Hook run before every lookup. Default: load the plugins (once)."""
        load_plugins()
