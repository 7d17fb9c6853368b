"""The waits between status polls: ``--poll-interval`` as given, or a ramp from 5 s.

A ``run --wait`` against a batch that ends in seconds used to wait a whole minute before
its second look (issue 38's newcomer trial); without ``--poll-interval`` the waits now
start at :data:`FIRST_POLL_INTERVAL_SECS` and double up to the interval.
"""

from __future__ import annotations

from mmirage_beam.check.watch import watch_statuses
from mmirage_beam.cycle.flags import DEFAULT_POLL_INTERVAL_SECS, FIRST_POLL_INTERVAL_SECS
from mmirage_beam.run.lookup import BatchStatus


class _Checker:
    """Answers ``in_progress`` for ``polls - 1`` polls, then ``completed``."""

    def __init__(self, polls: int) -> None:
        self.left = polls

    def check(self, batches):
        self.left -= 1
        status = "completed" if self.left <= 0 else "in_progress"
        return [BatchStatus(receipt=b, status=status) for b in batches]


def _waits(polls: int, **kwargs) -> list[float]:
    waits: list[float] = []
    now = [0.0]

    def sleep(secs: float) -> None:
        waits.append(secs)
        now[0] += secs

    statuses, timed_out = watch_statuses(
        _Checker(polls), ["batch-1"], sleep=sleep, clock=lambda: now[0], **kwargs
    )
    assert [s.status for s in statuses] == ["completed"] and not timed_out
    return waits


def test_the_default_waits_ramp_up_to_the_interval():
    waits = _waits(
        8,
        interval_secs=DEFAULT_POLL_INTERVAL_SECS,
        first_interval_secs=FIRST_POLL_INTERVAL_SECS,
    )
    assert waits == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0, 60.0]


def test_a_given_interval_is_kept_from_the_first_wait():
    assert _waits(4, interval_secs=30.0) == [30.0, 30.0, 30.0]


def test_the_ramp_never_waits_past_the_timeout():
    waits = _waits(3, interval_secs=60.0, first_interval_secs=5.0, timeout_secs=100.0)
    assert waits == [5.0, 10.0]
