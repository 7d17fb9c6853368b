"""Provider plugins: the adapter contract (``base``) and one module per provider.

Importing this package registers the built-in adapters (``openai``, ``anthropic``): the
adapter modules register themselves with :class:`BatchAdapterRegistry` at import. They
import no SDK at module level (clients are built in ``setup``), so this stays cheap, and
:mod:`mmirage_beam.providers.base` itself imports none of them.
"""

# The built-ins, registered here rather than from the contract module.
from mmirage_beam.providers import anthropic_batch as _anthropic_batch  # noqa: E402, F401
from mmirage_beam.providers import openai_batch as _openai_batch  # noqa: E402, F401
from mmirage_beam.providers.base import (
    BatchAdapterRegistry,
    BatchSubmissionAdapter,
    BatchSubmissionResult,
    credential_env_var,
    resolve_credentials,
)

__all__ = [
    "BatchAdapterRegistry",
    "BatchSubmissionAdapter",
    "BatchSubmissionResult",
    "credential_env_var",
    "resolve_credentials",
]
