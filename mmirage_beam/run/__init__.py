"""A run's life: the files of a run, its lease and fingerprint, receipts, resume, staging,
run selection, and the ledger, listing and cancel records (docs/architecture.md)."""
