"""One line for a failed job: which exceptions are storage failures, and what a runner
says when a worker process died."""

from __future__ import annotations

#: What Beam's portable runners (the Python job service, Flink's, Dataflow's) say when
#: an SDK worker process died or its connection dropped mid-bundle: the data channel
#: closes (``apache_beam/runners/worker/data_plane.py``: "Channel closed prematurely.").
WORKER_LOST_MESSAGES = (
    "Channel closed prematurely",
    "SDK harness",
    "harness disconnected",
    "worker lost",
    "Socket closed",
)

#: The modules whose exceptions are storage failures: Beam's filesystems, boto3 under
#: ``s3://``, and google-cloud-storage under ``gs://`` (its API errors, ``403
#: Forbidden``..., its upload and download errors, its credentials' errors).
STORAGE_ERROR_MODULES = (
    "apache_beam.io.",
    "botocore.",
    "boto3.",
    "google.api_core.exceptions",
    "google.cloud.storage.",
    "google.resumable_media.",
    "google.auth.exceptions",
)


def is_storage_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a storage failure raised through Beam's filesystems (Beam's
    ``BeamIOError``, its S3 client's ``S3ClientError``, a boto3/botocore error, a
    google-cloud-storage error: Beam's GCS filesystem lets them through unwrapped)
    rather than a bug: those reach the drivers when a location cannot be listed, read or
    written after the filesystem's own retries (:data:`STORAGE_ERROR_MODULES`)."""
    return any(
        (cls.__module__ or "").startswith(STORAGE_ERROR_MODULES) for cls in type(exc).__mro__
    )


def describe_failure(exc: BaseException) -> str:
    """One line for a failed job: the last line of ``exc``'s message (a runner's job
    failure carries the worker's whole traceback), and, when the runner reports a worker
    process that died or lost its connection (:data:`WORKER_LOST_MESSAGES`), a plain
    statement of that."""
    text = str(exc).strip().splitlines()
    last = text[-1].strip() if text else type(exc).__name__
    if any(m.lower() in str(exc).lower() for m in WORKER_LOST_MESSAGES):
        return (
            "a worker process of the runner died or lost its connection while the job ran "
            f"(the runner said: {last})"
        )
    return last
