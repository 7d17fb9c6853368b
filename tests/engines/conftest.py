"""The storage servers and the local reference the engine and storage tests share, one
per test module (``tests/storage_lifecycle.py`` runs the lifecycle on them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import storage_lifecycle as lc
from tests.storage_servers import GCSServer, S3Server, skip_unless_gcs_emulator, skip_unless_moto


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto's S3 server in its own process (the credentials: its ``env``; the endpoint:
    its ``flags``, Beam's pipeline options)."""
    skip_unless_moto()
    server = S3Server(tmp_path_factory.mktemp("moto"))
    server.start()
    yield server
    assert server.stop() == [], "moto's process group was not reaped"


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    """A GCS emulator in its own process."""
    skip_unless_gcs_emulator()
    server = GCSServer(tmp_path_factory.mktemp("gcs"))
    server.start()
    yield server
    assert server.stop() == [], "the emulator's process group was not reaped"


@pytest.fixture(scope="module")
def rows_file(tmp_path_factory) -> Path:
    """The lifecycle's rows (GSM8K with failure markers and an invalid row)."""
    return lc.write_rows(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory, rows_file) -> dict:
    """The lifecycle with every path on the local disk, on the DirectRunner: what a
    shared storage must match."""
    return lc.local_reference(tmp_path_factory.mktemp("local"), rows_file)
