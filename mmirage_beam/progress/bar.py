"""The launcher's live progress display on a terminal: a ``rich`` bar per counter.

:mod:`mmirage_beam.progress`'s reporter draws it (``begin`` builds it when stderr is a
terminal and the runner runs in the launcher's process) instead of the progress lines.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Mapping, Optional

from mmirage_beam.progress.text import (
    ORDER,
    OUTPUT_TOKENS,
    TOKEN_NAMES,
    counter_text,
    rate_per_sec,
    tokens_text,
)

__all__ = ["LiveBar"]


class LiveBar:
    """The launcher's live display on a terminal: a ``rich`` bar per counter with a
    total (a count per counter without one) and a row of tokens and cost."""

    def __init__(self, stream: Any) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn
        from rich.text import Text

        class _BarIfTotal(BarColumn):  # a count without a total gets no (pulsing) bar
            def render(self, task: Any) -> Any:
                return super().render(task) if task.total is not None else Text("")

        self._progress = Progress(
            TextColumn("[bold]{task.description:<17}[/bold]"),
            _BarIfTotal(),
            TextColumn("{task.fields[stats]}"),
            console=Console(file=stream),
            transient=False,
            redirect_stderr=True,
            redirect_stdout=False,
        )
        self._tasks: dict[str, Any] = {}
        self._started = self._stopped = False
        # the reporter draws, the launcher stops (drawing the last counts: re-entrant)
        self._lock = threading.RLock()

    def _task(self, name: str, total: Optional[int]) -> Any:
        task = self._tasks.get(name)
        if task is None:
            task = self._tasks[name] = self._progress.add_task(name, total=total, stats="")
            # rows in ORDER whatever came first, the tokens row last: the rows that
            # belong below the new one are drawn again after it
            rank = {n: i for i, n in enumerate(ORDER)}
            mine = rank.get(name, len(rank))
            for other in list(self._tasks):
                if other != name and (other.startswith("tokens") or rank.get(other, 99) > mine):
                    self._progress.remove_task(self._tasks.pop(other))
        return task

    def update(
        self,
        counts: Mapping[str, int],
        totals: Mapping[str, Optional[int]],
        first: Mapping[str, float],
        price: Any,
        now: float,
    ) -> None:
        """Draw this moment's counts."""
        with self._lock:
            if self._stopped:
                return
            if not self._started:
                self._progress.start()
                self._started = True
            for name, n in counts.items():
                if name in TOKEN_NAMES:
                    continue
                total = totals.get(name)
                rate = rate_per_sec(name, n, first, now) if total is not None else None
                stats = counter_text(name, n, total, rate, with_name=False)
                if name in totals and total is None:
                    stats += " of ?"
                task = self._task(name, total)
                self._progress.update(task, completed=n, total=total, stats=stats)
            tokens = tokens_text(counts, price)
            if tokens:
                what = "tokens (est.)" if OUTPUT_TOKENS not in counts else "tokens"
                self._progress.update(self._task(what, None), stats=tokens.removeprefix("tokens "))

    def stop(
        self,
        counts: Mapping[str, int],
        totals: Mapping[str, Optional[int]],
        first: Mapping[str, float],
        price: Any = None,
    ) -> None:
        """Draw the final counts and stop (the bar stays on screen)."""
        with self._lock:
            if self._started and not self._stopped:
                self.update(counts, totals, first, price, time.monotonic())
                self._progress.stop()
            self._stopped = True
