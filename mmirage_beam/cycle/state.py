"""Where a ``mmirage run --wait`` cycle stands: its phases and :class:`CycleState`.

The state is a small JSON file beside the run record, ``<base>.cycle.<run_id>.json``,
written durably at every step by :mod:`mmirage_beam.cycle.loop` (which re-exports these
names)::

    {"run_id": str, "phase": "submitting" | "waiting" | "merging" | "merged" |
     "retrying" | "done", "output_path": str, "retries": int, "retries_used": int,
     "runs": [run ids: the run, then its resubmissions], "retry_run": str | null,
     "resent": [requests re-sent by each retry], "updated_at": ISO 8601 UTC str}
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from typing import Optional

from mmirage_beam.errors import ConfigError
from mmirage_beam.run.layout import RunLayout
from mmirage_beam.run.ledger import read_json_record, write_json_record

__all__ = [
    "SUBMITTING",
    "WAITING",
    "MERGING",
    "MERGED",
    "RETRYING",
    "DONE",
    "PHASES",
    "cycle_state_path",
    "CycleState",
]

SUBMITTING = "submitting"
WAITING = "waiting"
MERGING = "merging"
MERGED = "merged"
RETRYING = "retrying"
DONE = "done"
PHASES = (SUBMITTING, WAITING, MERGING, MERGED, RETRYING, DONE)


def cycle_state_path(base: str, run_id: str) -> str:
    """``<base>.cycle.<run_id>.json``, beside the run record."""
    return RunLayout(base, run_id).cycle_state


@dataclasses.dataclass
class CycleState:
    """Where a cycle stands (see the module docstring for the file's fields)."""

    run_id: str
    output_path: str
    retries: int
    phase: str = SUBMITTING
    retries_used: int = 0
    runs: list[str] = dataclasses.field(default_factory=list)
    retry_run: Optional[str] = None
    resent: list[int] = dataclasses.field(default_factory=list)
    updated_at: Optional[str] = None

    def save(self, base: str) -> None:
        """Write the state durably (atomic replace)."""
        self.updated_at = _dt.datetime.now(_dt.timezone.utc).isoformat()
        write_json_record(cycle_state_path(base, self.run_id), dataclasses.asdict(self))

    @classmethod
    def load(cls, base: str, run_id: str) -> Optional[CycleState]:
        """The saved state of ``run_id``'s cycle, or None (never started with --wait).

        Raises:
            ConfigError: the file exists but is not a cycle state (naming its path).
        """
        path = cycle_state_path(base, run_id)
        raw = read_json_record(path)
        if raw is None:
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            state = cls(**{k: v for k, v in raw.items() if k in names})
        except TypeError as exc:
            raise ConfigError("--run-id", f"{path} is not a cycle state: {exc}") from None
        if state.phase not in PHASES:
            raise ConfigError("--run-id", f"{path}: unknown phase {state.phase!r}")
        return state
