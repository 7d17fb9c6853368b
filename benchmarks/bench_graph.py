"""Graph-size benchmark: what a small run pays for its Beam graph, warm, in one process.

Usage:
    python benchmarks/bench_graph.py [--repeat 5] [--rows 20] [--workdir DIR]

Small runs are dominated by the cost of the graph, not of the data: every ParDo is
inspected several times (construction, ``to_runner_api``, bundle-processor set-up) and
every fused stage builds a bundle processor. Three cases run in this process, after one
untimed warm-up of each, then ``--repeat`` times interleaved:

1. ``dry run``: ``mmirage run --config configs/gsm8k_openai.yaml --export-prompts ...
   --limit N`` (the bundled GSM8K rows; paths moved into the work folder).
2. ``submit``: ``mmirage run`` of N GSM8K rows, two outputs (plain and JSON), to the
   embedded fake provider (:class:`mmirage_beam.testing.FakeProviderServer`, started
   here on 127.0.0.1), as tests/cli/test_merge.py does.
3. ``merge``: ``mmirage merge`` of that run.

For each it prints the leaf transforms of the pipeline(s) it built (the DirectRunner's
``run_pipeline`` is wrapped to walk the graph), the GroupByKeys and Impulses among them
(what the runner turns into stages), the bundle processors built while running (one per
fused stage run) and the median wall time in seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

_COUNTS = {"leaves": 0, "stages": 0, "bundles": 0}


def _instrument() -> None:
    """Counts leaves and GroupByKey/Impulse leaves per pipeline run and bundle processors."""
    import apache_beam as beam
    from apache_beam.runners.direct import direct_runner
    from apache_beam.runners.worker import bundle_processor

    run_pipeline = direct_runner.DirectRunner.run_pipeline

    def counting_run(self, pipeline, options):
        class Visitor(beam.pipeline.PipelineVisitor):
            def visit_transform(self, node):
                _COUNTS["leaves"] += 1
                if isinstance(node.transform, (beam.GroupByKey, beam.Impulse)):
                    _COUNTS["stages"] += 1

        pipeline.visit(Visitor())
        return run_pipeline(self, pipeline, options)

    direct_runner.DirectRunner.run_pipeline = counting_run
    init = bundle_processor.BundleProcessor.__init__

    def counting_init(self, *args, **kwargs):
        _COUNTS["bundles"] += 1
        init(self, *args, **kwargs)

    bundle_processor.BundleProcessor.__init__ = counting_init


def _config(work: Path, name: str, rows: int, base_url: str = "") -> str:
    """configs/gsm8k_openai.yaml with every path moved into ``work`` (and ``rows`` rows)."""
    cfg = yaml.safe_load((REPO / "configs" / "gsm8k_openai.yaml").read_text(encoding="utf-8"))
    src = REPO / "mmirage_beam" / "examples" / "data" / "gsm8k" / "test.jsonl"
    data = work / f"{name}.rows.jsonl"
    data.write_text("".join(src.read_text(encoding="utf-8").splitlines(True)[:rows]), "utf-8")
    proc = cfg["processors"][0]
    proc["metadata_output_path"] = str(work / name / "batch_metadata.jsonl")
    proc["base_url"] = base_url
    cfg["loading_params"]["state_dir"] = str(work / name / "state")
    cfg["loading_params"]["datasets"][0].update(path=str(data), output_dir=str(work / name))
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return str(path)


def _timed(fn, *args) -> tuple[float, dict[str, int]]:
    for key in _COUNTS:
        _COUNTS[key] = 0
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = fn(*args)
    wall = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"{fn.__module__} {args} exited {code}")
    return wall, dict(_COUNTS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--workdir", default="")
    args = parser.parse_args(argv)

    import logging

    logging.disable(logging.WARNING)
    import mmirage_beam
    from mmirage_beam.testing import FakeProviderServer
    from pipelines.cli import main as cli_main

    print(f"mmirage_beam from {os.path.dirname(mmirage_beam.__file__)}")

    _instrument()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-graph-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ["OPENAI_API_KEY"] = "sk-test-openai"
    results: dict[str, list[tuple[float, dict[str, int]]]] = {}
    with FakeProviderServer() as fake:
        dry_cfg = _config(work, "dry", 1319)
        for n in range(args.repeat + 1):
            export = str(work / f"export{n}" / "p.jsonl")
            dry = _timed(
                cli_main,
                ["run", "--config", dry_cfg, "--export-prompts", export]
                + ["--run-id", f"d{n}", "--limit", str(args.rows)],
            )
            sub_cfg = _config(work, f"sub{n}", args.rows, fake.openai_base_url)
            submit = _timed(cli_main, ["run", "--config", sub_cfg, "--run-id", f"s{n}"])
            merged = str(work / f"merged{n}.jsonl")
            merge = _timed(cli_main, ["merge", "--config", sub_cfg, "--output-path", merged])
            if n == 0:  # warm-up
                continue
            for case, measured in (("dry run", dry), ("submit", submit), ("merge", merge)):
                results.setdefault(case, []).append(measured)
    print(f"rows {args.rows}, {args.repeat} warm repeats (work folder {work})")
    print("| case | leaf transforms | GroupByKeys+Impulses | bundle processors | median wall s |")
    print("|---|---:|---:|---:|---:|")
    for case, runs in results.items():
        counts = runs[-1][1]
        wall = statistics.median(w for w, _ in runs)
        print(
            f"| {case} | {counts['leaves']} | {counts['stages']} | {counts['bundles']} "
            f"| {wall:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
