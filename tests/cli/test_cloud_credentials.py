"""The clouds' own batch services take credentials from their SDK's chain (Google's
Application Default Credentials, boto3's), not from a ``<PROVIDER>_API_KEY``: a run
without any stops in the launcher with exit 2 and how to give some, before a row is
read, as a missing API key does (a Vertex run without them read its data, then retried
Cloud Storage anonymously for minutes)."""

from __future__ import annotations

import os

import pytest

from pipelines.submit import main as submit_main
from tests.conftest import base_config, write_config

CLOUDS = {
    "vertex": (
        {"project": "p", "location": "us-central1", "gcs_staging_uri": "gs://my-bucket/x"},
        "Application Default Credentials",
    ),
    "bedrock": (
        {"role_arn": "arn:aws:iam::123456789012:role/r", "s3_staging_uri": "s3://my-bucket/x"},
        "AWS_ACCESS_KEY_ID",
    ),
}


@pytest.fixture
def no_cloud_credentials(tmp_path, monkeypatch):
    """An environment where neither chain can find anything, quickly: no variables, no
    files under HOME, no metadata servers asked."""
    for var in list(os.environ):
        if var.startswith(("AWS_", "GOOGLE_", "CLOUDSDK_", "VERTEX_")):
            monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # google.auth: no metadata server


@pytest.mark.parametrize("provider", sorted(CLOUDS))
def test_a_cloud_run_without_credentials_stops_before_reading(
    provider, tmp_path, capsys, no_cloud_credentials
):
    keys, hint = CLOUDS[provider]
    cfg = base_config(tmp_path, provider, **keys)
    config = write_config(tmp_path, cfg)
    assert submit_main(["--config", config]) == 2
    out, err = capsys.readouterr()
    assert f"provider '{provider}'" in err and hint in err, err
    assert "rows read" not in out + err  # nothing was read, nothing staged
    assert not (tmp_path / "meta").exists() or not any((tmp_path / "meta").iterdir())
