"""What a service knows and refuses about models and request parameters, as one contract
the project and the fake provider share (the fake imports the tables; nothing here
imports the fake).

Each provider's table is a :class:`ModelRules` in its own package
(``providers/<name>/rules.py``, with the sources of every rule), hung on its config class
as ``MODEL_RULES``; this module holds the machinery: model names (listed by the SDK's own
types, or documented), accepted patterns (snapshots, fine-tunes), request keys (the SDK's
params TypedDicts), per-family :class:`Refusal` rules, and :func:`check_config`, which
``config_from_dict`` runs on the ``batch_api`` processor. The table with its sources is
also in ``docs/fake-provider.md`` ("Model and parameter rules").
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["ModelRules", "Refusal", "check_config", "literals", "typed_keys"]


def literals(tp: Any) -> list[str]:
    """Every string of the ``Literal``\\ s inside a type (through ``Union``, ``Required``,
    and the ``ForwardRef`` a TypedDict keeps for a string annotation, evaluated in
    ``namespace``-free form by :func:`typing.get_args`)."""
    out: list[str] = []
    for arg in typing.get_args(tp):
        if isinstance(arg, str):
            out.append(arg)
        else:
            out += literals(arg)
    return out


def typed_keys(typed: Any) -> set[str]:
    """The keys a params ``TypedDict`` (and its bases) names."""
    keys: set[str] = set()
    for klass in getattr(typed, "__mro__", (typed,)):
        keys |= set(getattr(klass, "__annotations__", {}))
    return keys


@dataclass(frozen=True)
class Refusal:
    """One parameter the service refuses.

    Attributes:
        key: the request body key (``max_tokens``, ``temperature``,
            ``thinking.budget_tokens``).
        message: the service's wording.
        code: OpenAI's error ``code`` (``unsupported_parameter``, ``unsupported_value``,
            ``invalid_value``); others keep the default.
        hint: what to send instead, if anything.
    """

    key: str
    message: str
    code: str = "invalid_value"
    hint: Optional[str] = None


def _no_refusals(model: str, params: Mapping[str, Any]) -> list[Refusal]:
    return []


def _no_keys(endpoint: str) -> frozenset[str]:
    return frozenset()


@dataclass(frozen=True)
class ModelRules:
    """One service's model and parameter table.

    Attributes:
        service: the name warnings use ("the <service> SDK lists").
        source: where the names come from (SDK type or doc URL).
        names: returns the listed names (exact matches; did-you-mean candidates).
        patterns: names matching any of these are served too (fine-tunes, families).
        snapshot: a name matching it whose ``base`` group is listed is served (dated
            snapshots such as ``gpt-4o-mini-2024-07-18``).
        strip_prefix: removed before matching (Gemini's ``models/``).
        refusals: ``(model, request params) -> [Refusal]``, the per-family rules.
        request_keys: ``endpoint -> keys`` the SDK's params TypedDict names (empty:
            keys are not checked).
    """

    service: str
    source: str
    names: Callable[[], frozenset[str]]
    patterns: tuple[re.Pattern[str], ...] = ()
    snapshot: Optional[re.Pattern[str]] = None
    strip_prefix: str = ""
    refusals: Callable[[str, Mapping[str, Any]], list[Refusal]] = field(default=_no_refusals)
    request_keys: Callable[[str], frozenset[str]] = field(default=_no_keys)

    def is_known(self, model: str, extra: Iterable[str] = ()) -> bool:
        """Whether the service serves ``model``: listed, a listed name's snapshot,
        matching a pattern, or one of ``extra``."""
        if model in set(extra):
            return True
        name = model.removeprefix(self.strip_prefix) if self.strip_prefix else model
        listed = self.names()
        if name in listed or any(p.match(name) for p in self.patterns):
            return True
        snap = self.snapshot.match(name) if self.snapshot else None
        return bool(snap and snap["base"] in listed)

    def did_you_mean(self, model: str, n: int = 3) -> list[str]:
        """Up to ``n`` listed names closest to ``model`` (difflib), best first."""
        return difflib.get_close_matches(model, sorted(self.names()), n=n, cutoff=0.6)


#: YAML keys of the generation settings judged as request keys of the same name (the
#: config's ``max_tokens`` is sent as ``max_completion_tokens`` / ``max_output_tokens``
#: by the OpenAI adapter, so it is not judged as ``max_tokens``).
CONFIG_SETTINGS = ("temperature", "top_p")


def check_config(
    rules: Optional[ModelRules],
    model: Any,
    settings: Mapping[str, Any],
    key: str,
    check_name: bool = True,
) -> list[str]:
    """The config-load check of a ``batch_api`` processor: a model the provider's SDK
    (or docs) do not list is a warning (returned, with "did you mean"); a setting the
    model family refuses raises.

    Args:
        rules: the provider config class's ``MODEL_RULES`` (None: not checked, e.g.
            Azure deployments, which are named freely).
        model: the YAML ``model``.
        settings: YAML key -> value of the processor (``temperature``, ``top_p``...).
        key: the processor's YAML path (``processors[0]``), to name keys.
        check_name: False: the model name is not looked up (no warning; the SDK's
            types are not imported), only the refused settings are checked.

    Returns:
        Warning messages, each naming ``<key>.model``.

    Raises:
        ConfigError: naming ``<key>.<setting>`` for a setting the family refuses (an
            OpenAI reasoning model with ``temperature`` or ``top_p`` other than 1).
    """
    from mmirage_beam.errors import ConfigError

    warnings: list[str] = []
    if rules is None or not isinstance(model, str):
        return warnings
    if check_name and not rules.is_known(model):
        close = rules.did_you_mean(model)
        hint = f"did you mean {close[0]!r}? " if close else ""
        warnings.append(
            f"{key}.model: {model!r} is not a model the {rules.service} SDK lists "
            f"({rules.source}); {hint}the service refuses an unknown model (ignore this "
            "if the model is newer than the SDK or your own)"
        )
    request = {k: settings[k] for k in CONFIG_SETTINGS if settings.get(k) is not None}
    for refusal in rules.refusals(model, request):
        instead = f"; set {refusal.hint} instead" if refusal.hint else "; leave it unset"
        raise ConfigError(
            f"{key}.{refusal.key}", f"{model!r} refuses it: {refusal.message}{instead}"
        )
    return warnings
