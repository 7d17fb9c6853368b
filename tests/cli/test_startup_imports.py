"""The commands that build no pipeline do not import Beam (about 2 CPU seconds of
start-up: its package ``__init__`` loads coders, runners, pandas, pyarrow, boto3).

One small run is submitted, waited for and merged on the DirectRunner against the
embedded fake; then ``mmirage --help``, ``runs``, ``check`` and ``cancel`` run in fresh
interpreters over its local state, each reporting the modules it loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.submit import main as run_main
from tests.conftest import GSM8K_JSONL, REPO, base_config, write_config

#: what a command prints last: its exit status and the heavy packages it imported
_PROBE = """
import json, sys
from pipelines.cli import main
code = main(sys.argv[1:])
heavy = ("apache_beam", "pyarrow", "pandas", "boto3", "grpc")
print(json.dumps({"code": code, "loaded": [m for m in heavy if m in sys.modules]}))
"""


@pytest.fixture
def finished_run(tmp_path: Path, provider_env, capsys) -> str:
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:4]) + "\n")
    cfg = base_config(tmp_path, base_url=provider_env.openai_base_url)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    path = write_config(tmp_path, cfg)
    code = run_main(["--config", path, "--wait", "--poll-interval", "0.1"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    return path


def _probe(*argv: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_light_commands_do_not_import_beam(finished_run: str) -> None:
    for argv in (
        ["--help"],
        ["runs", "--config", finished_run],
        ["check", "--config", finished_run],
        ["cancel", "--config", finished_run, "--yes"],
    ):
        result = _probe(*argv)
        assert result == {"code": 0, "loaded": []}, (argv, result)
