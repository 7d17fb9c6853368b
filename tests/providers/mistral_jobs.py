"""What the Mistral fake's tests share: the result lines of a finished batch job."""

from __future__ import annotations

import json
from typing import Any


def job_lines(client: Any, job: Any) -> dict[str, dict]:
    """The lines of ``job``'s output and error files (mistralai ``BatchJobOut``, read
    through ``client.files.download``), by custom_id."""
    out = {}
    for fid in (job.output_file, job.error_file):
        for raw in client.files.download(file_id=fid).read().split(b"\n") if fid else ():
            if raw:
                out[json.loads(raw)["custom_id"]] = json.loads(raw)
    return out
