"""Ctrl-C on run (while reading), merge and check --watch is one line and the command to
continue; a wrong --metadata-path is one clear line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from pipelines.check import main as check_main
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, GSM8K_PARQUET, REPO, base_config, write_config
from tests.slow_proxy import SlowProxy


def test_a_file_that_is_not_receipts_is_one_clear_line(tmp_path, capsys):
    cfg = write_config(tmp_path, base_config(tmp_path))
    for wrong in (GSM8K_JSONL, GSM8K_PARQUET):
        assert check_main(["--config", cfg, "--metadata-path", str(wrong)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "is not a receipt file" in err and str(wrong) in err


def test_ctrl_c_on_merge_and_on_check_watch_is_one_line_not_a_traceback(tmp_path, provider_env):
    fake = provider_env
    with SlowProxy(fake.openai_base_url.removesuffix("/v1")) as proxy:
        _ctrl_c_on_merge_and_check(tmp_path, fake, proxy)


def _ctrl_c_on_merge_and_check(tmp_path, fake, proxy) -> None:  # noqa: ANN001
    cfg = base_config(tmp_path, base_url=proxy.base_url + "/v1")
    path = write_config(tmp_path, cfg)
    assert submit_main(["--config", path, "--run-id", "ctrlc"]) == 0
    env = dict(os.environ, PYTHONPATH=str(REPO))
    py = [sys.executable, "-m"]
    merge = [*py, "pipelines.merge", "--config", path, "--output-path", str(tmp_path / "m.jsonl")]
    # The merge's first file download is held back, so the Ctrl-C comes while the job
    # fetches results, on a fast machine as on a slow one (a fixed sleep let a quick
    # merge finish first and exit 0).
    proxy.delay("GET", "/v1/files/*", 120)
    proc = subprocess.Popen(merge, env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not proxy.delayed and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proxy.release()  # the held download answers: the stopping job need not wait it out
    _, err = proc.communicate(timeout=120)
    code = proc.returncode
    assert code == 130 and proxy.delayed == 1, err
    assert "Traceback" not in err and "run the same command again" in err
    # no partial output: neither the merged file, its errors file nor the temp folder
    assert [p.name for p in tmp_path.glob("m.*")] == [], list(tmp_path.iterdir())
    # A Ctrl-C whose KeyboardInterrupt is swallowed before the job (C code that clears
    # the errors it sees, e.g. an extension module's import) still stops the merge.
    swallow = (
        "import os, signal, sys, time\n"
        "import mmirage_beam.config as c\n"
        "load = c.load_config\n"
        "def swallowing(*a, **k):\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(5)\n"
        "    except BaseException:\n"
        "        pass\n"
        "    return load(*a, **k)\n"
        "c.load_config = swallowing\n"
        "from pipelines.merge import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", swallow, *merge[3:]],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and "run the same command again" in proc.stderr
    assert [p.name for p in tmp_path.glob("m.*")] == [], list(tmp_path.iterdir())
    fake.script(processing_delay_secs=600)  # batches of a new run stay in progress
    assert submit_main(["--config", path, "--run-id", "slow"]) == 0
    watch = [*py, "pipelines.check", "--config", path, "--run-id", "slow", "--watch"]
    proc = subprocess.Popen(
        watch + ["--interval", "1"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = proc.stdout.readline()  # the plain display's first poll line
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    code, out = proc.returncode, first + out
    assert code == 130, err
    assert "Traceback" not in err and "cancelled" not in err + out
    # check starts nothing: it says the batches keep running, and shows the last table
    assert "stopped watching (Ctrl-C): 1 batch(es) not finished yet keep running" in out
    assert "in_progress" in out, out


def test_ctrl_c_inside_exec_code_still_exits_130_under_python_m(tmp_path):
    """CPython marks a KeyboardInterrupt raised in ``exec()``'d code as unhandled even when
    it is caught, and ``python -m`` then ends the process by SIGINT (-2); dataclasses build
    their methods with exec, so a Ctrl-C during a lazy import hit it. The drivers exit 130."""
    (tmp_path / "exec_interrupted.py").write_text(
        "import sys\n"
        "from mmirage_beam.launch.interrupts import guarded\n"
        "def _main(argv):\n"
        "    exec('import os, signal, time\\n'\n"
        "         'os.kill(os.getpid(), signal.SIGINT)\\ntime.sleep(5)')\n"
        "    return 0\n"
        "sys.exit(guarded(_main)())\n",
        encoding="utf-8",
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-m", "exec_interrupted"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 130, (proc.returncode, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "run the same command again" in proc.stderr


def test_ctrl_c_while_rows_are_read_stops_within_seconds(tmp_path, provider_env):
    """Before any chunk is being submitted there is nothing to wait for: the first Ctrl-C
    stops reading at once (it read every remaining row first), and the run says
    'stopped' with the resume command, not 'the pipeline failed'."""
    fake = provider_env
    lines = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(lines * 10) + "\n", encoding="utf-8")  # 13,190 rows
    cfg = base_config(tmp_path, base_url=fake.openai_base_url)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    path = write_config(tmp_path, cfg)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "pipelines.submit", "--config", path, "--run-id", "cc"]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    err = ""
    for line in proc.stderr:  # the count pass is over: the rows are being read
        err += line
        if "rows in 1 splits" in line:
            break
    proc.send_signal(signal.SIGINT)  # the event above, not a fixed sleep (issue 38)
    _, rest = proc.communicate(timeout=120)
    err += rest
    assert proc.returncode == 130, err
    assert "stopping at once: no batch is being submitted" in err
    assert "mmirage run cc: stopped (Ctrl-C or SIGTERM)" in err
    assert "the pipeline failed" not in err and "Traceback" not in err
    assert f"mmirage run --config {path} --run-id cc" in err
    assert fake.batches() == []


def test_ctrl_c_when_every_chunk_is_in_flight_is_said_and_exits_130(tmp_path, provider_env):
    """Issue 38: a Ctrl-C that came when every chunk was already being submitted was
    ignored (exit 0, no "stopped" line): the job ends as usual, every batch receipted,
    and the run says it was stopped too late to stop anything, exit 130."""
    fake = provider_env
    lines = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:4]
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = base_config(tmp_path, base_url=fake.openai_base_url)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    path = write_config(tmp_path, cfg)
    # the one chunk's upload answers 503 once, retry after 3 s: the chunk is in flight
    fake.script(
        leading_errors={
            "status": 503,
            "count": 1,
            "retry_after_ms": 3000,
            "paths": ["files_create"],
        }
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "pipelines.submit", "--config", path, "--run-id", "late"]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    err = ""
    for line in proc.stderr:  # the 503 was answered and its retry is waiting
        err += line
        if "files.create" in line and "retrying in" in line:
            break
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    err += rest
    assert proc.returncode == 130, err
    assert "waiting for the provider calls in flight to be receipted" in err
    assert "mmirage run late: stopped (Ctrl-C or SIGTERM), but every chunk was already" in err
    assert f"mmirage check --config {path} --run-id late --watch" in err
    assert len(fake.batches()) == 1 and "Traceback" not in err
    receipt = tmp_path / "meta" / "batch_metadata.text.late.jsonl"
    assert receipt.exists()


def test_early_ctrl_c_of_run_wait_leaves_no_run_behind(tmp_path, provider_env, capsys):
    """Issue 38: a Ctrl-C before anything was sent printed a generic message and left a
    run record, so the next run of the config was refused as "already submitted". The
    stop says nothing was sent, and the run is forgotten."""
    from mmirage_beam.run.store import run_records

    fake = provider_env
    lines = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:4]
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = base_config(tmp_path, base_url=fake.openai_base_url)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    path = write_config(tmp_path, cfg)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "pipelines.submit", "--config", path, "--wait"]
    proc = subprocess.Popen(
        cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    out = ""
    for line in proc.stdout:  # the run is held: its job is being built
        out += line
        if "submit, wait, merge into" in line:
            break
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    out += rest
    assert proc.returncode == 130, out
    assert "stopped (Ctrl-C or SIGTERM) before anything was sent; nothing to resume" in out, out
    assert "mmirage: interrupted" not in out and "Traceback" not in out
    assert fake.batches() == []
    assert run_records(str(tmp_path / "meta" / "batch_metadata")) == []
    assert submit_main(["--config", path]) == 0  # not refused as "already submitted"


def test_sigterm_during_start_up_is_a_stop_with_a_message(tmp_path, provider_env):
    """Issue 38: a SIGTERM before the job's own handlers were in place ended the process
    with -15 and no word. It is a stop like a Ctrl-C: one line, exit 130."""
    fake = provider_env
    lines = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:4]
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = base_config(tmp_path, base_url=fake.openai_base_url)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    path = write_config(tmp_path, cfg)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "pipelines.submit", "--config", path]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    err = proc.stderr.readline()  # its first line: the run has started up
    proc.send_signal(signal.SIGTERM)
    _, rest = proc.communicate(timeout=120)
    err += rest
    assert proc.returncode == 130, err
    assert "SIGTERM" in err and "Traceback" not in err
    assert fake.batches() == []
