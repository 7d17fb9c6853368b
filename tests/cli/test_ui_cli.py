"""``mmirage ui`` as a user starts it: a process that prints its URL and token, serves
the runs of a real submission (``--no-lookup``: no key), refuses actions without the
token, stops with exit 0 on Ctrl-C, and exits 2 when its port is taken. The page itself
is tested in a browser in test_ui.py."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request

from pipelines.submit import main as run_main
from tests.conftest import REPO, base_config, write_config


def _start(*args: str) -> tuple[subprocess.Popen, list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.ui", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    for line in proc.stdout:  # the URL and token lines come flushed, then it serves
        lines.append(line.rstrip("\n"))
        if "or open http" in line:
            break
    return proc, lines


def test_ui_serves_the_runs_and_stops_on_ctrl_c(tmp_path, capsys, provider_env):
    cfg = write_config(tmp_path, base_config(tmp_path, base_url=provider_env.openai_base_url))
    assert run_main(["--config", cfg, "--run-id", "r1", "--limit", "5"]) == 0
    # another state folder: a copy of the config whose receipts live elsewhere
    other = base_config(tmp_path, base_url=provider_env.openai_base_url)
    other["processors"][0]["metadata_output_path"] = str(
        tmp_path / "elsewhere" / "batch_metadata.jsonl"
    )
    assert (
        run_main(
            [
                "--config",
                write_config(tmp_path, other, "other.yaml"),
                "--run-id",
                "r2",
                "--limit",
                "3",
            ]
        )
        == 0
    )
    capsys.readouterr()
    proc, lines = _start(
        "--config", cfg, "--state", str(tmp_path / "elsewhere"), "--port", "0", "--no-lookup"
    )
    try:
        text = "\n".join(lines)
        url = re.search(r"serving (http://127\.0\.0\.1:\d+)/", text).group(1)
        token = re.search(r"need this token: (\S+)", text).group(1)
        assert f"{url}/#token={token}" in text and len(token) >= 40
        with urllib.request.urlopen(f"{url}/api/runs", timeout=60) as r:
            runs = json.load(r)["runs"]
        got = [(x["config"], x["run_id"], x["state"], x["requests"]) for x in runs]
        assert got == [(0, "r1", "submitted", 5), (1, "r2", "submitted", 3)]
        post = urllib.request.Request(f"{url}/api/runs/0/r1/cancel", data=b"{}", method="POST")
        try:
            urllib.request.urlopen(post, timeout=60)
            raise AssertionError("a cancel without the token was accepted")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
        # a second dashboard on the same port: refused, exit 2
        port = url.rsplit(":", 1)[1]
        taken = subprocess.run(
            [sys.executable, "-m", "pipelines.ui", "--config", cfg, "--port", port],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert taken.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in taken.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "mmirage ui: stopped" in out


def test_a_taken_port_is_said_once(tmp_path, capsys):
    """``mmirage ui --port P`` on a port in use: one line naming it, exit 2 (Werkzeug
    printed its own lines first; the newcomer's fake-provider held the default port)."""
    import socket

    from pipelines.ui import main as ui_main

    cfg = write_config(tmp_path, base_config(tmp_path))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert ui_main(["--config", cfg, "--port", str(port), "--no-lookup"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"mmirage ui: cannot listen on 127.0.0.1:{port}: port {port} is in use"
