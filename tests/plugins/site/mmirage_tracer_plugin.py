"""Provider ``tracer``: OpenAI's Batch API (the real SDK, through ``OpenAIBatchAdapter``)
that records which process ran each of its steps.

Every ``build_request``, ``setup`` and ``submit_chunk_lines`` call appends one JSON line
``{"stage", "pid", "ppid", "cwd", "key_sha256", "worker_imports"}`` to the file named by
``$MMIRAGE_TRACE_FILE`` (nothing is recorded when it is unset). ``key_sha256`` is the first
12 hex digits of the SHA-256 of the API key the adapter holds (``null`` without one), so a
test can tell whose key a worker used without the key being written anywhere.
``worker_imports`` says whether the process had imported
``mmirage_beam.worker_imports``: on an SDK worker only its ``--beam_plugins``
start-up imports it.

The key comes from ``TRACER_API_KEY`` or ``TRACER_API_KEY_FILE``, like any provider's.
Registered through the ``mmirage_beam.providers`` entry point of the ``.dist-info``
folder next to this file.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Dict, Sequence

from mmirage_beam.config.batch_provider import BatchProviderConfigRegistry

from mmirage_beam.providers.base import BatchAdapterRegistry
from mmirage_beam.providers.openai import OpenAIBatchConfig
from mmirage_beam.providers.openai.adapter import OpenAIBatchAdapter

TRACE_ENV_VAR = "MMIRAGE_TRACE_FILE"


@dataclass
class TracerBatchConfig(OpenAIBatchConfig):
    provider: str = "tracer"


class TracerBatchAdapter(OpenAIBatchAdapter):
    """``OpenAIBatchAdapter`` plus one trace line per step (see the module docstring)."""

    def _trace(self, stage: str) -> None:
        path = os.environ.get(TRACE_ENV_VAR)
        if not path:
            return
        key = self.credentials.get("api_key")
        line = {
            "stage": stage,
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "cwd": os.getcwd(),
            "key_sha256": hashlib.sha256(key.encode()).hexdigest()[:12] if key else None,
            "worker_imports": "mmirage_beam.worker_imports" in sys.modules,
        }
        with open(path, "a", encoding="utf-8") as f:  # one short line: an atomic append
            f.write(json.dumps(line) + "\n")

    def build_request(self, custom_id: str, payload: Dict[str, Any], config: Any) -> Dict:
        self._trace("build_request")
        return super().build_request(custom_id, payload, config)

    def setup(self, config: Any) -> None:
        super().setup(config)
        self._trace("setup")

    def submit_chunk_lines(self, chunk_id: str, lines: Sequence[bytes], config: Any) -> Dict:
        self._trace("submit_chunk_lines")
        return super().submit_chunk_lines(chunk_id, lines, config)


BatchProviderConfigRegistry.register("tracer", TracerBatchConfig)
BatchAdapterRegistry.register("tracer", TracerBatchAdapter)
