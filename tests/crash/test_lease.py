"""One process per run: the lease on a run id (local disk and an object store)."""

from __future__ import annotations

import collections
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from mmirage_beam.run.lease import RunLocked, acquire, lease_path, read_lease
from pipelines.submit import main as submit_main
from tests.conftest import REPO, base_config, write_config


def _sent(fake) -> collections.Counter:
    return collections.Counter(r["custom_id"] for r in fake.submitted_requests())


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_two_processes_started_together_on_one_run_id_only_one_submits(
    tmp_path, provider_env, provider
):
    fake = provider_env
    url = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
    path = write_config(tmp_path, base_config(tmp_path, provider, base_url=url))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "pipelines.submit", "--config", path, "--run-id", "twin"]
    procs = [
        subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], [o[1].decode()[-2000:] for o in outs]
    loser_err = next(o[1].decode() for p, o in zip(procs, outs) if p.returncode == 2)
    assert "run twin is in use by another process" in loser_err
    assert f"on host {socket.gethostname()}" in loser_err and "nothing was sent" in loser_err
    sent = _sent(fake)
    assert sorted(sent) == sorted(f"answer-text-{i}" for i in range(1319))
    assert set(sent.values()) == {1}
    assert not (tmp_path / "meta" / "batch_metadata.lease.twin").exists()  # released


def _write_lease(tmp_path, run_id: str, **fields) -> None:
    path = lease_path(str(tmp_path / "meta" / "batch_metadata"), run_id)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    info = {"run_id": run_id, "token": "old", "started_at": time.time() - 9999}
    info.update(fields)
    with open(path, "w") as f:
        json.dump(info, f)


def test_a_lease_of_a_dead_process_on_this_host_is_taken_over(tmp_path, provider_env, capsys):
    fake = provider_env
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _write_lease(tmp_path, "r1", host=socket.gethostname(), pid=dead.pid, refreshed_at=time.time())
    cfg = base_config(tmp_path, base_url=fake.openai_base_url)
    assert submit_main(["--config", write_config(tmp_path, cfg), "--run-id", "r1"]) == 0
    assert len(_sent(fake)) == 1319
    assert not (tmp_path / "meta" / "batch_metadata.lease.r1").exists()


def test_a_stale_lease_of_another_host_is_taken_over_a_fresh_one_refuses(
    tmp_path, provider_env, capsys
):
    fake = provider_env
    cfg = base_config(tmp_path, base_url=fake.openai_base_url)
    path = write_config(tmp_path, cfg)
    _write_lease(tmp_path, "r2", host="elsewhere", pid=1, refreshed_at=time.time() - 5)
    assert submit_main(["--config", path, "--run-id", "r2"]) == 2
    err = capsys.readouterr().err
    assert "run r2 is in use by another process (pid 1 on host elsewhere" in err
    assert fake.batches() == [] and fake.call_counts().get("files_create", 0) == 0
    # Not refreshed for more than 3 x 30 s: stale.
    _write_lease(tmp_path, "r2", host="elsewhere", pid=1, refreshed_at=time.time() - 91)
    assert submit_main(["--config", path, "--run-id", "r2"]) == 0
    assert len(_sent(fake)) == 1319


def test_a_failing_run_releases_its_lease(tmp_path, provider_env, capsys):
    fake = provider_env
    fake.script(fail_batch_creates={"nth": 1, "permanent": True, "status": 400})
    cfg = base_config(tmp_path, base_url=fake.openai_base_url)
    assert submit_main(["--config", write_config(tmp_path, cfg), "--run-id", "r3"]) == 1
    assert not (tmp_path / "meta" / "batch_metadata.lease.r3").exists()


def _until(condition, limit_secs: float = 30.0) -> None:  # noqa: ANN001
    """Wait for ``condition()`` (an event of the refresher thread), checking often."""
    deadline = time.monotonic() + limit_secs
    while not condition():
        assert time.monotonic() < deadline, "the refresher never got there"
        time.sleep(0.01)


def test_refresh_keeps_the_lease_and_notices_when_it_was_lost(tmp_path):
    base = str(tmp_path / "b")
    lost = []
    lease = acquire(base, "r", refresh_secs=0.05, on_lost=lost.append)
    first = read_lease(lease.path).refreshed_at
    lease.start_refreshing()
    _until(lambda: read_lease(lease.path).refreshed_at > first)  # a refresh, not a sleep
    with pytest.raises(RunLocked):
        acquire(base, "r")
    # Another holder's token in the file (the object-store race): refresh gives up. The
    # file is replaced whole, as an object store writes it (an open-and-write here let
    # the refresher read it empty, half written, on a loaded machine).
    other = lease.path + ".other"
    with open(other, "w") as f:
        json.dump({"token": "someone-else", "host": "h", "pid": 7, "refreshed_at": time.time()}, f)
    os.replace(other, lease.path)
    _until(lambda: lease.lost and lost)  # the next refresh notices
    assert lost[0]["token"] == "someone-else"
    lease.release()
    assert read_lease(lease.path).token == "someone-else"  # not ours: left alone


def test_object_store_lease_is_exclusive_and_released(tmp_path):
    from tests import memfs  # noqa: F401  (registers mem://)

    base = f"mem://lease-{os.getpid()}-{time.time_ns()}/b"
    lease = acquire(base, "r", settle_secs=0.0)
    with pytest.raises(RunLocked, match="in use by another process"):
        acquire(base, "r", settle_secs=0.0)
    lease.release()
    assert read_lease(lease_path(base, "r")) is None
    acquire(base, "r", settle_secs=0.0).release()
