"""The drivers' logging (``mmirage_beam.launch.logs``)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

#: what Beam logs at import when its GCS filesystem's optional packages are missing
#: (apache_beam/io/gcp/gcsio.py and apache_beam/io/filesystems.py)
NOISE = (
    "apitools not found; loading of this filesystem will be skipped",
    "Failed to import GCSFileSystem; loading of this filesystem will be skipped.",
)


def test_beams_import_notices_are_not_printed_on_every_command():
    """Issue 38: ``WARNING:root:apitools not found`` and ``Failed to import
    GCSFileSystem`` appeared on every command; the drivers' logging drops them (they
    concern storage the user did not ask for) and keeps every other warning."""
    code = (
        "import logging\n"
        "from mmirage_beam.launch.logs import configure_logging\n"
        "configure_logging()\n"
        f"logging.getLogger().warning({NOISE[0]!r})\n"
        f"logging.getLogger('apache_beam.io.filesystems').warning({NOISE[1]!r})\n"
        "logging.getLogger().warning('a warning that matters')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "a warning that matters" in done.stderr
    assert "apitools" not in done.stderr and "GCSFileSystem" not in done.stderr, done.stderr
