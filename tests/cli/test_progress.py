"""Progress a person can read: ``mmirage run`` and ``merge`` through the drivers (in
subprocesses, real Beam runners) against the embedded fake on the bundled GSM8K rows:
done of total, rate, ETA, tokens and cost; the live bar on a terminal (a pty) and lines
without one; the estimate before submitting told once, in multi_processing mode too;
``run --wait``'s poll lines with rate, ETA and tokens so far."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, REPO, base_config, write_config

ROWS = 700  # read in well under a second: lines every 0.02 s catch it midway
# a line of the run's read phase with its total, percentage, rate and ETA
LINE_WITH_ETA = re.compile(
    rf"progress after \d[\w ]*: rows read [\d,]+ of {ROWS} \(\d+%\), [\d,]+ rows/s, ETA \d"
)


def _env(fake=None, **extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), TERM="xterm-256color", COLUMNS="120")
    env.pop("MMIRAGE_PROGRESS", None)
    if fake is not None:
        env["OPENAI_API_KEY"] = "sk-test-openai"
    env.update(extra)
    return env


def _config(tmp_path, fake=None, rows=None, **processor):
    cfg = base_config(
        tmp_path,
        base_url=fake.openai_base_url if fake else None,
        model="gpt-4.1-mini",  # a row of the price table: the cost is shown
        **processor,
    )
    if rows is not None:
        data = tmp_path / "rows.jsonl"
        data.write_text(
            "".join(GSM8K_JSONL.read_text(encoding="utf-8").splitlines(keepends=True)[:rows]),
            encoding="utf-8",
        )
        cfg["loading_params"]["datasets"][0]["path"] = str(data)
    return write_config(tmp_path, cfg)


def test_run_wait_and_merge_say_done_of_total_rate_eta_tokens_and_cost(
    tmp_path, capsys, monkeypatch, provider_env
):
    fake = provider_env
    fake.script(processing_delay_secs=6.0)  # processed from 2 s to 4 s: polls see it move
    # a line every 0.02 s: reading 700 rows (placeholder rows rendered without Jinja)
    # can take under 0.2 s, and a line must catch it midway
    monkeypatch.setenv("MMIRAGE_PROGRESS_INTERVAL_SECS", "0.02")
    cfg = _config(tmp_path, fake, rows=ROWS, max_requests_per_chunk=100)
    out = tmp_path / "merged.jsonl"
    argv = ["--config", cfg, "--wait", "--poll-interval", "0.25", "--output-path", str(out)]
    assert submit_main(argv) == 0
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    ran = err[: next(i for i, x in enumerate(err) if "mmirage merge:" in x)]
    merged = err[len(ran) :]
    # run: rows read of the readers' total, with rate and ETA while reading; tokens
    # counted as requests are built, priced at gpt-4.1-mini's batch price
    lines = [x for x in ran if "progress after" in x]
    assert any(LINE_WITH_ETA.search(x) for x in lines), lines
    assert re.search(r"; input tokens [\d.]+k? \(est\. \$\d", lines[-1]), lines[-1]
    assert "━" not in captured.err  # stderr is not a terminal: lines, no bar
    # merge: results of the receipts' request count; tokens as the provider reported
    lines = [x for x in merged if "progress after" in x]
    assert any(re.search(rf"results fetched [\d,]+ of {ROWS:,} \(\d+%\)", x) for x in lines)
    assert any(re.search(rf"rows read [\d,]+ of {ROWS:,} \(\d+%\)", x) for x in lines)
    assert re.search(r"tokens [\d.]+k? in \+ [\d.]+k? out, cost \$\d", lines[-1]), lines[-1]
    # --wait: requests done of total with rate and ETA, the estimated tokens so far
    polls = [x for x in captured.out.splitlines() if x.startswith("poll ")]
    assert len(polls) >= 3, polls
    assert "input tokens ~" in polls[0] and "(est. $" in polls[0]
    assert any(re.search(r"[\d.]+ requests/s, ETA \d", p) for p in polls), polls
    assert re.search(
        rf"requests done {ROWS}/{ROWS}, failed 0; .*input tokens ~([\d.]+k?) of \1", polls[-1]
    ), polls[-1]


def _on_a_pty(args: list[str], env: dict[str, str], cwd) -> str:
    """Run ``pipelines.submit`` with stderr on a pseudo-terminal; its stderr output."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines.submit", *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=follower,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert proc.wait(timeout=300) == 0, b"".join(chunks).decode("utf-8", "replace")[-3000:]
    return b"".join(chunks).decode("utf-8", "replace")


def test_a_terminal_gets_the_live_bar(tmp_path):
    cfg = _config(tmp_path, rows=100)
    env = _env(MMIRAGE_PROGRESS_INTERVAL_SECS="0.1")
    args = ["--config", cfg, "--export-prompts", str(tmp_path / "p.jsonl")]  # a dry run
    shown = _on_a_pty([*args, "--run-id", "tty"], env, tmp_path)
    assert "━" in shown and "rows read" in shown, shown[-2000:]  # rich's bar
    assert "100 of 100 (100%)" in shown
    assert "input tokens" in shown and "(est. $" in shown
    assert "progress after" not in shown  # the bar replaces the lines
    # (without a terminal, the same job prints lines and no bar: the test above)


@pytest.mark.parametrize(
    "done,total,rate,want",
    [
        (
            132_000,
            1_000_000,
            6_600.0,
            "rows read 132,000 of 1,000,000 (13%), 6,600 rows/s, ETA 2 min 12 s",
        ),
        (1_000, 1_000, 50.0, "rows read 1,000 of 1,000 (100%)"),
        (5, None, None, "rows read 5"),
    ],
)
def test_counter_text(done, total, rate, want):
    from mmirage_beam.progress.text import counter_text

    assert counter_text("rows read", done, total, rate) == want


@pytest.mark.parametrize(
    "flags,live",
    [
        ([], True),
        (["--runner=DirectRunner", "--direct_running_mode=multi_threading"], True),
        (["--direct_running_mode=multi_processing", "--direct_num_workers=2"], False),
        (["--runner=PrismRunner"], False),
        (["--runner=FlinkRunner"], False),
    ],
)
def test_the_bar_is_drawn_only_for_runners_that_run_in_the_launchers_process(flags, live):
    from apache_beam.options.pipeline_options import PipelineOptions

    from mmirage_beam.progress.counters import runs_in_process

    assert runs_in_process(PipelineOptions(flags)) is live
