"""Limits the fakes share, of the real services they fake.

Read them as ``limits.NAME`` at call time (tests lower some with ``monkeypatch``). Each
provider's own limits live with its fake (``mmirage_beam/providers/<name>/fake_service.py``),
with their sources.
"""

from __future__ import annotations

import re

# The default cap of a batch input upload, in bytes (``FakeProviderServer(
# max_batch_file_bytes=...)``): 200 MB, the OpenAI Batch guide's "can be up to 200 MB in
# size", as the adapters read it (providers/openai/config.py).
MAX_BATCH_FILE_BYTES = 200_000_000
DEFAULT_LIST_LIMIT = 20
BATCH_LIFETIME_SECS = 24 * 60 * 60
TOKENS_PER_IMAGE = 10

CUSTOM_ID_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
SCHEMA_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
