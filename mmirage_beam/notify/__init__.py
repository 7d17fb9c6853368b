"""Notifications when a run ends (``execution_params.notify``; docs/notifications.md).

- :mod:`~mmirage_beam.notify.events`: a run's :class:`RunSnapshot` (counts, tokens,
  cost, the next command, from the batch statuses and records ``mmirage check`` reads)
  and :func:`events_for` -> the :class:`Event` s it reached (``completed``, ``failed``,
  ``expired``, ``cancelled``, ``budget_reached``).
- :mod:`~mmirage_beam.notify.webhooks`: the JSON or Slack body, its HMAC-SHA256
  signature, delivery with bounded retries, and ``<base>.notifications.<run_id>.jsonl``,
  the record that keeps a restart from sending an event twice; :func:`notify_run`, the
  one call of ``run --wait``, ``check --watch`` and the dashboard's poller.

Imports ``check/``, ``run/``, ``costs/``, ``io/``; imported by ``cycle/`` and ``pipelines/``.
"""

from mmirage_beam.notify.events import Event, RunSnapshot, event_id, events_for, snapshot_of
from mmirage_beam.notify.webhooks import (
    SCHEMA,
    Delivery,
    NotifyResult,
    build_body,
    deliver,
    delivered_ids,
    notifications_path,
    notify_run,
    redact_url,
    sign,
    slack_text,
)

__all__ = [
    "SCHEMA",
    "Delivery",
    "Event",
    "NotifyResult",
    "RunSnapshot",
    "build_body",
    "deliver",
    "delivered_ids",
    "event_id",
    "events_for",
    "notifications_path",
    "notify_run",
    "redact_url",
    "sign",
    "slack_text",
    "snapshot_of",
]
