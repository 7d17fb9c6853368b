"""A run's life: the files of a run, its lease and fingerprint, receipts and their
discovery, batch-status lookups, the enqueued-token budget, resume, staging, run
selection, and the ledger, listing and cancel records; the files as typed records
(``records.py``) behind one ``RunStore`` (``store.py``) (docs/architecture.md)."""
