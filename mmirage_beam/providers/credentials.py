"""Provider credentials, read from the environment (never from the config).

:func:`credential_env_var` names the variable of one credential key
(``<PROVIDER>_<KEY>``); :func:`resolve_credentials` reads every key an adapter class
requires, from that variable, the adapter's fallbacks, or a ``_FILE`` naming a mounted
secret. The adapter contract (:mod:`mmirage_beam.providers.base`) re-exports both.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Dict, Mapping, Optional

from mmirage_beam.errors import CredentialsError

__all__ = ["credential_env_var", "resolve_credentials"]


def credential_env_var(provider: str, key: str) -> str:
    """``<PROVIDER>_<KEY>`` upper-cased, non-alphanumerics turned into ``_``.

    >>> credential_env_var("azure-openai", "api_key")
    'AZURE_OPENAI_API_KEY'
    """
    return re.sub(r"[^A-Za-z0-9]", "_", f"{provider}_{key}").upper()


def resolve_credentials(
    adapter_cls: type,
    provider: str,
    environ: Optional[Mapping[str, str]] = None,
) -> Dict[str, str]:
    """Read every ``required_credentials`` entry of ``adapter_cls`` (a
    :class:`~mmirage_beam.providers.base.BatchSubmissionAdapter` subclass) from the
    environment.

    Each key ``k`` comes from ``<PROVIDER>_<K>``, else from the adapter's
    ``CREDENTIAL_FALLBACKS[k]`` variables (e.g. ``GOOGLE_API_KEY``), else from the file
    named by ``<PROVIDER>_<K>_FILE`` (mounted secrets); surrounding whitespace is stripped.

    Raises:
        CredentialsError: naming the variable(s) to set, or from the adapter's
            ``check_credentials()``; never includes a value.
        ConfigError: the adapter's ``check_dependencies()`` found its SDK missing.
    """
    adapter_cls.check_dependencies()  # an optional SDK that is missing names its extra
    adapter_cls.check_credentials()  # a cloud SDK's own chain (ADC, boto3) finds some
    env = os.environ if environ is None else environ
    found: Dict[str, str] = {}
    missing = []
    fallbacks = adapter_cls.CREDENTIAL_FALLBACKS
    for key in adapter_cls.required_credentials:
        var = credential_env_var(provider, key)
        value = env.get(var)
        for other in () if value else fallbacks.get(key, ()):
            value = env.get(other)  # e.g. the SDK's own variable (GOOGLE_API_KEY)
            if value:
                break
        if not value and env.get(f"{var}_FILE"):
            path = env[f"{var}_FILE"]
            try:
                value = Path(path).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise CredentialsError(
                    f"{var}_FILE points to {path!r}, which cannot be read ({exc.strerror})"
                ) from None
            except UnicodeDecodeError:
                raise CredentialsError(
                    f"{var}_FILE points to {path!r}, which is not UTF-8 text"
                ) from None
        if value:
            found[key] = value.strip()
        else:
            missing.append(var)
    if missing:
        raise CredentialsError(
            f"provider {provider!r} needs {' and '.join(missing)} in the environment "
            f"(or {missing[0]}_FILE naming a file that holds it); keys are never read from "
            "the config. ('mmirage run --export-prompts P' is a dry run that needs no key.)"
        )
    return found
