"""The whole lifecycle with its shared storage on a GCS emulator, through Beam's own GCS
filesystem, byte for byte the same as on the local disk.

The emulator (PyPI's ``gcp-storage-emulator``, in memory) runs in its own process
(``tests/storage_servers.py``: :class:`~tests.storage_servers.GCSServer`). The config's
``metadata_output_path`` and ``output_dir``, the dry run's export and ``merge
--output-path`` are all ``gs://`` URIs. No command takes a flag: Beam's GCS filesystem
has no pipeline option for the endpoint, and every command (``check``, ``runs`` and
``cancel`` too) reaches the emulator through ``STORAGE_EMULATOR_HOST``, which
google-cloud-storage honours. The credentials are an offline ``authorized_user`` file
(``GOOGLE_APPLICATION_CREDENTIALS``) so Beam does not spend 30 s looking for Google's
default credentials before it connects anonymously. The comparison with the same config
on the local disk is ``tests/storage_lifecycle.py``'s, as for ``s3://``: the export,
merged, errors, invalid-rows and placeholder files, read back with google-cloud-storage,
and each custom_id created once. And GCS's ``403 Forbidden``, which Beam's GCS filesystem
lets through as google-cloud-storage's own error, ends a command with one line.

Skipped when the emulator (or Beam's ``gcp`` extra) cannot be imported, failed instead
with ``$MMIRAGE_REQUIRE_PORTABLE=1`` (CI).
"""

from __future__ import annotations

import os
import time

from mmirage_beam.testing import FakeProviderServer
from tests import storage_lifecycle as lc
from tests.runners import clean_env, run_cli_in_process


def test_the_lifecycle_on_gcs_matches_the_local_disk(gcs, rows_file, local_reference, tmp_path):
    """Dry run, submit, check, merge, resubmit, merge, runs and cancel (of this run: nothing
    left; of a run still running: cancelled) with the receipts, placeholder rows, export
    and merged files in the emulator's bucket: the same bytes as on disk."""
    prefix = "lifecycle"
    store = gcs.uri(prefix)
    got = lc.lifecycle(
        lc.launcher(tmp_path / "launch", rows_file, store),
        store,
        lambda rel: gcs.read(f"{prefix}/{rel}"),
        [],  # no flag: the endpoint and the credentials come from the environment
        gcs.env,
        {},
    )
    lc.assert_matches_local(got, local_reference, gcs.keys(prefix), prefix)


def test_the_offline_credentials_need_no_network(gcs, monkeypatch):
    """``google.auth.default()`` with :attr:`GCSServer.env` succeeds at once with a
    token that is valid (never refreshed: a refresh would call oauth2.googleapis.com),
    so Beam skips its 30 s of retries looking for credentials."""
    import google.auth

    for name in list(os.environ):
        if name.startswith(("GOOGLE_", "GCLOUD_", "CLOUDSDK_")):
            monkeypatch.delenv(name)
    for name, value in gcs.env.items():
        monkeypatch.setenv(name, value)
    start = time.monotonic()
    credentials, project = google.auth.default(
        scopes=["https://www.googleapis.com/auth/cloud-platform"]
    )
    assert time.monotonic() - start < 5
    assert credentials.valid and not credentials.expired
    assert project == "mmirage-test"


def test_a_forbidden_bucket_ends_a_command_with_one_line(gcs, rows_file, tmp_path):
    """GCS answers ``403 Forbidden`` to every object read (credentials that may not use
    the bucket): google-cloud-storage does not retry it and Beam's GCS filesystem does
    not wrap it (``FileSystems.exists`` raises ``google.api_core.exceptions.Forbidden``),
    yet ``run`` (resuming a named run: it reads that run's record first) ends with one
    line naming it, exit 1, no traceback, nothing sent."""
    root = lc.launcher(tmp_path / "launch", rows_file, gcs.uri("forbidden"))
    with FakeProviderServer() as fake, gcs.fault_proxy() as proxy:
        proxy.refuse(100)
        env = clean_env({"OPENAI_API_KEY": lc.KEY, "MMIRAGE_OPENAI_BASE_URL": fake.openai_base_url})
        run = run_cli_in_process(
            ["run", "--config", "config.yaml", "--run-id", "denied", "--skip-invalid-rows"],
            root,
            {**env, **proxy.env},
        )
        assert fake.batches() == []
    assert run.returncode == 1, run.stdout + run.stderr[-4000:]
    assert "Traceback" not in run.stderr, run.stderr[-4000:]
    errors = [ln for ln in run.stderr.splitlines() if ln.startswith("mmirage")]
    assert len(errors) == 1 and errors[0].startswith("mmirage: error: storage: 403 "), errors
    assert proxy.failed, "no call reached the proxy"
