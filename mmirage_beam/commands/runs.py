"""``RunsCommand``: the runs under a config's state, one row per run and its linked
resubmissions (what ``mmirage runs`` runs once its flags are parsed; the rows are
:func:`mmirage_beam.run.listing.list_runs`'s)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mmirage_beam.run.listing import RunRow

__all__ = ["RunsCommand", "RunsReport"]


@dataclasses.dataclass(frozen=True)
class RunsReport:
    """What ``mmirage runs`` found.

    Attributes:
        rows: one row per chain of linked runs, the newest first.
        lines: what ``mmirage runs`` prints: the table and its total, or that there is
            no run yet.
        exit_code: 0 (also when there is no run).
    """

    rows: tuple[RunRow, ...]
    lines: tuple[str, ...]
    exit_code: int = 0


@dataclasses.dataclass(frozen=True)
class RunsCommand:
    """``mmirage runs``'s inputs.

    Attributes:
        config_path: the config whose state holds the runs.
        lookup: ask the providers for the batches' statuses (needs their keys); False:
            runs not merged show ``submitted``.
    """

    config_path: str
    lookup: bool = True

    def run(self) -> RunsReport:
        """List the runs and format their table.

        Raises:
            mmirage_beam.errors.ConfigError: a bad config (exit 2).
            mmirage_beam.errors.CredentialsError: a provider key is missing for a lookup
                (exit 2).
        """
        from mmirage_beam.config import load_config
        from mmirage_beam.run.listing import format_table, list_runs

        rows = tuple(
            list_runs(load_config(self.config_path, check_models=False), lookup=self.lookup)
        )
        if not rows:
            return RunsReport(rows, (f"mmirage runs: no run under {self.config_path}'s state yet",))
        return RunsReport(rows, tuple(format_table(rows)))
