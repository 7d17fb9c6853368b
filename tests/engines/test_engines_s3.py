"""The whole lifecycle on a real Flink cluster with its state on ``s3://`` (moto's
server): split from ``test_engines.py`` so that its cluster and the other engine tests'
run on two xdist workers at once (each module gets a cluster of its own:
``tests/engines/conftest.py``). See ``test_engines.py`` for the cluster and what CI
runs.
"""

from __future__ import annotations

import pytest

from tests import storage_lifecycle as storage
from tests.engines.conftest import CAMPAIGN, campaign

pytestmark = pytest.mark.timeout(900)


def test_flink_lifecycle_on_s3_matches_the_local_disk(
    flink, s3, rows_file, local_reference, tmp_path
):
    """The receipts, staged chunks, placeholder rows, export and merged files on
    ``s3://`` (a moto server, through Beam's S3 filesystem: ``--s3_endpoint_url`` in the
    pipeline options reaches the TaskManagers' workers through the provision service,
    the credentials come from their environment): the dry run, submission, ``check``,
    merge, ``resubmit`` of the retryable failure, merge again, ``runs``, and ``cancel``
    of a run whose batch is still running give the same bytes as the same config on the
    local disk on the DirectRunner, and each custom_id is created once
    (``tests/storage_lifecycle.py``). In CI the submission and the first merge run on
    Flink (each Flink job costs about a minute of the 20); ``MMIRAGE_ENGINE_CAMPAIGN=1``
    runs every pipeline of it on Flink."""
    prefix = "flinklc"
    store = s3.uri(prefix)
    got = storage.lifecycle(
        storage.launcher(tmp_path / "launch", rows_file, store),
        store,
        lambda rel: s3.read(f"{prefix}/{rel}"),
        s3.flags,
        s3.env,
        {"AWS_ENDPOINT_URL_S3": s3.endpoint},
        runner_flags=flink.flags,
        # CI: the submission (workers write intents, receipts, placeholders to S3) and
        # the merge (workers read them) on Flink, the rest on the DirectRunner over the
        # same S3 state (test_s3_storage.py runs it all there); the campaign: every step
        engine_steps=None if CAMPAIGN else frozenset({"submit", "merge"}),
    )
    storage.assert_matches_local(got, local_reference, s3.keys(prefix), prefix)


@campaign
def test_s3_faults_while_the_flink_workers_publish(flink, s3, rows_file, local_reference, tmp_path):
    """A burst of S3 ``503 SlowDown`` and slow writes while the TaskManagers' SDK
    workers write the intents and receipts (``test_s3_storage.publish_through_faults``,
    the pipelines on Flink): the run survives or stops with one line and its resume
    command, and ends with the local disk's files, each request created once."""
    from tests.engines.test_s3_storage import publish_through_faults

    publish_through_faults(s3, rows_file, local_reference, tmp_path, runner_flags=flink.flags)
