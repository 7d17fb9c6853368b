"""Provider plugins: the adapter contract (``base``) and one module per provider."""

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
