"""Benchmark: the mmirage dry run vs a minimal plain-Python loop, side by side, and merge.

Usage:
    python benchmarks/bench_dry_run.py N [--workdir DIR] [--no-merge] [extra Beam options]

Makes an N-row JSONL by repeating the bundled GSM8K test split, then runs, each in its
own process so peak memory is measured separately:
  1. ``mmirage run --export-prompts`` (the whole Beam pipeline: read with source_index,
     extract, render, build, chunk, export, receipts, placeholder rows);
  2. a minimal loop that reads the same JSONL, renders the same Jinja2 template and
     writes the same OpenAI request lines (no validation, chunking or receipts).
  3. unless ``--no-merge``: the same rows submitted to the embedded fake provider
     (started here, on a loopback port), then ``mmirage merge`` timed on its own: fetch
     results, re-read and verify the source, join, ordered write.
Prints wall time, rows/s and peak RSS for each, and the dry run's ratios to the loop.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "mmirage_beam" / "examples" / "data" / "gsm8k" / "test.jsonl"
PROMPT = "Answer concisely:\n{{ question }}"
MODEL = "gpt-4.1-mini"

CONFIG = """
processors:
  - type: batch_api
    provider: openai
    model: {model}
    max_requests_per_chunk: 50000
    metadata_output_path: {work}/meta/batch_metadata.jsonl
loading_params:
  datasets:
    - path: {data}
      type: JSONL
      output_dir: {work}/shards
processing_params:
  inputs:
    - name: question
      key: question
  outputs:
    - name: answer
      type: batch_api
      output_type: plain
      prompt: {prompt}
  remove_columns: true
  output_schema:
    question: "{{{{ question }}}}"
    answer: "{{{{ answer }}}}"
execution_params:
  mode: local
"""

PLAIN_LOOP = r"""
import json, sys
import jinja2
src, dst, prompt, model = sys.argv[1:5]
tmpl = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(prompt)
with open(src, encoding="utf-8") as f, open(dst, "w", encoding="utf-8") as out:
    i = 0
    for line in f:
        if not line.strip():
            continue
        row = json.loads(line)
        req = {"custom_id": f"answer-text-{i}", "method": "POST", "url": "/v1/chat/completions",
               "body": {"model": model, "messages": [{"role": "user",
                        "content": tmpl.render(question=row["question"])}]}}
        out.write(json.dumps({"batch_id": "text-answer-chunk-000001", "request": req},
                             ensure_ascii=False, separators=(",", ":")) + "\n")
        i += 1
"""


def make_rows(n: int, path: Path) -> None:
    lines = [ln for ln in SAMPLE.read_text(encoding="utf-8").splitlines() if ln.strip()]
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(lines[i % len(lines)] + "\n")


def timed(cmd: list[str]) -> tuple[float, float]:
    """Run ``cmd`` in a child process; return (seconds, that child's peak RSS in MiB).

    ``os.wait4`` gives the resource usage of exactly this child (not the running maximum
    over all children that ``RUSAGE_CHILDREN`` would give).
    """
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        _pid, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            out.seek(0)
            log = out.read().decode("utf-8", "replace")
            sys.exit(f"benchmark command failed: {' '.join(cmd)}\n{log}")
    return seconds, usage.ru_maxrss / 1024.0  # Linux: ru_maxrss is in KiB


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, help="number of rows")
    ap.add_argument("--workdir", help="keep files here (default: a temp folder)")
    ap.add_argument("--no-merge", action="store_true", help="skip the merge measurement")
    args, beam_args = ap.parse_known_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="mmirage-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "rows.jsonl"
    make_rows(args.n, data)
    cfg = work / "bench.yaml"
    cfg.write_text(
        CONFIG.format(model=MODEL, work=work, data=data, prompt=json.dumps(PROMPT)),
        encoding="utf-8",
    )
    loop_py = work / "plain_loop.py"
    loop_py.write_text(PLAIN_LOOP, encoding="utf-8")

    t_loop, m_loop = timed(
        [sys.executable, str(loop_py), str(data), str(work / "plain.jsonl"), PROMPT, MODEL]
    )
    t_beam, m_beam = timed(
        [
            sys.executable,
            "-m",
            "pipelines.submit",
            "--config",
            str(cfg),
            "--export-prompts",
            str(work / "prompts.jsonl"),
            "--run-id",
            "bench",
            *beam_args,
        ]
    )
    exported = sum(1 for _ in (work / "prompts.bench.jsonl").open(encoding="utf-8"))
    if exported != args.n:
        sys.exit(f"expected {args.n} exported requests, found {exported}")
    merge_row = None if args.no_merge else merge_benchmark(work, cfg, beam_args)
    n = args.n
    print(f"rows: {n:,}  (GSM8K test split repeated; one plain output per row)")
    print(f"{'':28}{'seconds':>10}{'rows/s':>12}{'peak RSS MiB':>15}")
    print(f"{'plain Python loop':28}{t_loop:>10.2f}{n / t_loop:>12,.0f}{m_loop:>15.1f}")
    print(f"{'mmirage dry run (Beam)':28}{t_beam:>10.2f}{n / t_beam:>12,.0f}{m_beam:>15.1f}")
    print(
        f"{'ratio mmirage / loop':28}{t_beam / t_loop:>9.1f}x{(n / t_beam) / (n / t_loop):>11.2f}x"
        f"{m_beam / m_loop:>14.1f}x"
    )
    if merge_row is not None:
        t_merge, m_merge = merge_row
        print(f"{'mmirage merge (Beam)':28}{t_merge:>10.2f}{n / t_merge:>12,.0f}{m_merge:>15.1f}")
    return 0


def merge_benchmark(work: Path, cfg: Path, beam_args: list[str]) -> tuple[float, float]:
    """Submit the rows to a fake provider started here, then time ``mmirage merge``."""
    sys.path.insert(0, str(REPO))
    from mmirage_beam.testing import FakeProviderServer

    text = cfg.read_text(encoding="utf-8")
    with FakeProviderServer() as fake:
        live = work / "bench_live.yaml"
        live.write_text(
            text.replace(
                "provider: openai", f"provider: openai\n    base_url: {fake.openai_base_url}"
            ),
            encoding="utf-8",
        )
        env = dict(os.environ, OPENAI_API_KEY="sk-bench-fake")
        submit = subprocess.run(
            [sys.executable, "-m", "pipelines.submit", "--config", str(live), "--run-id", "live"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
        if submit.returncode != 0:
            sys.exit(f"benchmark submission failed:\n{submit.stdout}\n{submit.stderr}")
        os.environ["OPENAI_API_KEY"] = "sk-bench-fake"
        result = timed(
            [
                sys.executable,
                "-m",
                "pipelines.merge",
                "--config",
                str(live),
                "--output-path",
                str(work / "merged.jsonl"),
                *beam_args,
            ]
        )
    merged = sum(1 for _ in (work / "merged.jsonl").open(encoding="utf-8"))
    rows = sum(1 for _ in (work / "rows.jsonl").open(encoding="utf-8"))
    if merged != rows:
        sys.exit(f"expected {rows} merged rows, found {merged}")
    return result


if __name__ == "__main__":
    sys.exit(main())
