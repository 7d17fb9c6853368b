"""Provider plugins: the adapter contract (``base``) and one package per provider.

Importing this package registers the built-in providers: each package
(``mmirage_beam/providers/<name>/``) registers its config class and its adapter when
imported. They import no SDK at module level (clients are built in ``setup``), so this
stays cheap, and :mod:`mmirage_beam.providers.base` itself imports none of them.
"""

# The built-ins, registered here rather than from the contract module.
from mmirage_beam.providers import anthropic as _anthropic  # noqa: E402, F401
from mmirage_beam.providers import bedrock as _bedrock  # noqa: E402, F401
from mmirage_beam.providers import gemini as _gemini  # noqa: E402, F401
from mmirage_beam.providers import mistral as _mistral  # noqa: E402, F401
from mmirage_beam.providers import openai as _openai  # noqa: E402, F401
from mmirage_beam.providers import vertex as _vertex  # noqa: E402, F401
from mmirage_beam.providers.base import (
    BatchAdapterRegistry,
    BatchSubmissionAdapter,
    BatchSubmissionResult,
    ProviderLimits,
    credential_env_var,
    resolve_credentials,
)

__all__ = [
    "BatchAdapterRegistry",
    "BatchSubmissionAdapter",
    "BatchSubmissionResult",
    "ProviderLimits",
    "credential_env_var",
    "resolve_credentials",
]
