"""``mmirage demo`` / ``python -m pipelines.demo``: the whole lifecycle on the bundled
GSM8K sample, no account needed.

Starts the embedded fake provider on a free loopback port, then runs, exactly as a user
would: ``mmirage run`` (submit), ``mmirage check --watch`` (until every batch has
ended), and ``mmirage merge``; prints where the merged file is and its first rows.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

import mmirage_beam

#: the GSM8K sample the package ships (``mmirage_beam/examples/data/``)
SAMPLE = Path(mmirage_beam.__file__).resolve().parent / "examples" / "data" / "gsm8k" / "test.jsonl"

CONFIG = """\
# Written by `mmirage demo`: GSM8K (MIT) -> {provider} batches on the embedded fake provider.
processors:
  - type: batch_api
    provider: {provider}
{processor}    metadata_output_path: {work}/receipts/batch_metadata.jsonl

loading_params:
  datasets:
    - path: {data}
      type: JSONL
      output_dir: {work}/shards

processing_params:
  inputs:
    - name: question
      key: question
    - name: reference
      key: answer
  outputs:
    - name: solution
      type: batch_api
      output_type: plain
      prompt: |
        Solve this grade-school maths problem step by step, then give the final number.
        {{{{ question }}}}
    - name: grading
      type: batch_api
      output_type: JSON
      prompt: |
        Give the final numeric answer and rate the difficulty from 1 to 5.
        Problem: {{{{ question }}}}
        Reference solution: {{{{ reference }}}}
      output_schema:
        final_answer: number
        difficulty: {{type: integer, min: 1, max: 5}}
  remove_columns: true
  output_schema:
    question: "{{{{ question }}}}"
    solution: "{{{{ solution }}}}"
    final_answer: "{{{{ grading.final_answer }}}}"
    difficulty: "{{{{ grading.difficulty }}}}"

execution_params:
  mode: local
"""

DEMO_KEY = "sk-mmirage-demo-not-a-real-key"


def parser() -> argparse.ArgumentParser:
    """The command line of ``mmirage demo``."""
    ap = argparse.ArgumentParser(
        allow_abbrev=False,  # a prefix of a flag must never pass for the flag
        prog="mmirage demo",
        description="Submit, watch and merge the bundled GSM8K sample against the embedded "
        "fake provider (no key, no network).",
    )
    from mmirage_beam.testing.fake_registry import registered_fakes

    fakes = registered_fakes()  # the built-ins register theirs (rank order)
    # the providers a registered fake serves under its own name: the shared fake's demo,
    # or the fake's own demo() when it has one
    served = [n for n, cls in fakes.items() if n in getattr(cls, "provider_names", (n,))]
    ap.add_argument("--provider", choices=served, default=served[0])
    ap.add_argument(
        "--workdir",
        default="mmirage-demo",
        help="where files go (in a <provider>/ folder, replaced on every demo)",
    )
    ap.add_argument("--rows", type=int, default=200, help="GSM8K rows to use (max 1319)")
    ap.add_argument("--delay", type=float, default=3.0, help="seconds the fake takes per batch")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the demo; returns the exit status of the first step that fails, else 0."""
    args = parser().parse_args(argv)
    if args.rows < 1:
        print("mmirage demo: --rows must be at least 1", file=sys.stderr)
        return 2

    import shutil

    from mmirage_beam.ids import new_run_id
    from pipelines.check import main as check_main
    from pipelines.merge import main as merge_main
    from pipelines.submit import main as submit_main

    # Each provider's demo has a folder of its own, started afresh, so a demo never
    # checks or merges the batches of an earlier one (whose fake server is gone).
    work = Path(args.workdir).resolve() / args.provider
    marker = work / ".mmirage-demo"  # only a folder an earlier demo made is replaced
    if work.exists() and not marker.exists() and any(work.iterdir()):
        print(
            f"mmirage demo: {work} exists and was not made by a demo; not replacing it "
            "(choose another --workdir)",
            file=sys.stderr,
        )
        return 2
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    marker.write_text("made by mmirage demo; replaced by the next demo\n", encoding="utf-8")
    run_id = new_run_id()
    data = work / "gsm8k_sample.jsonl"
    text = SAMPLE.read_text(encoding="utf-8")
    lines = [ln for ln in text.split("\n") if ln.strip()]  # JSONL: split on "\n" only
    data.write_text("\n".join(lines[: args.rows]) + "\n", encoding="utf-8")
    n_rows = min(len(lines), args.rows)
    if args.rows > n_rows:
        print(
            f"mmirage demo: --rows {args.rows} is more than the bundled sample holds; "
            f"using all {n_rows} rows",
            file=sys.stderr,
        )

    with contextlib.ExitStack() as stack:
        try:
            base_url, processor = _fake_services(stack, args.provider, args.delay, work, n_rows)
        except RuntimeError as exc:
            print(f"mmirage demo: {exc}", file=sys.stderr)
            return 2
        config = work / f"demo_{args.provider}.yaml"
        config.write_text(
            CONFIG.format(
                provider=args.provider,
                processor="".join(f"    {k}: {json.dumps(v)}\n" for k, v in processor.items()),
                work=work,
                data=data,
            ),
            encoding="utf-8",
        )
        os.environ[f"{args.provider.upper()}_API_KEY"] = DEMO_KEY
        print(f"== fake {args.provider} batch API on {base_url}")
        print(f"== config: {config}\n")
        print(f"== 1/3  mmirage run --config {config}")
        code = submit_main(["--config", str(config), "--run-id", run_id])
        if code:
            return code
        print(f"\n== 2/3  mmirage check --config {config} --watch")
        code = check_main(
            ["--config", str(config), "--run-id", run_id, "--watch", "--interval", "1"]
        )
        if code:
            return code
        merged = work / "merged.jsonl"
        print(f"\n== 3/3  mmirage merge --config {config} --output-path {merged}")
        code = merge_main(
            ["--config", str(config), "--run-id", run_id, "--output-path", str(merged)]
        )
    print(
        "\nnote: the fake provider's token usage is synthetic (it counts words, not the "
        "model's tokens), so the tokens and cost reported after the merge do not match "
        "the estimate before submitting, which counts real tokens"
    )
    print(f"\nmerged file: {merged}")
    with merged.open(encoding="utf-8") as f:
        for _, line in zip(range(3), f):
            print(json.dumps(json.loads(line), ensure_ascii=False, indent=2))
    return code


def _fake_services(
    stack: contextlib.ExitStack, provider: str, delay: float, work: Path, n_rows: int
) -> tuple[str, dict[str, object]]:
    """Start the fake(s) ``provider``'s demo talks to, on ``stack``: ``(base_url,
    processor keys)``. The embedded fake serves the built-in providers; a fake that lives
    in its provider's package and registered itself (``testing/fake_registry``) says in
    its ``demo`` what else it needs and which processor keys it sets (Bedrock: S3;
    Vertex AI: a server of its own on a GCS emulator, with ``project``, ``location``,
    ``gcs_staging_uri``).

    Raises:
        RuntimeError: a demo's own service cannot start (its message says why).
    """
    per_chunk = max(10, n_rows // 4)
    from mmirage_beam.testing import FakeProviderServer

    fake = stack.enter_context(FakeProviderServer(processing_delay_secs=delay))
    base_url = fake.base_url_for(provider)
    processor: dict[str, object] = {"base_url": base_url, "max_requests_per_chunk": per_chunk}
    demo = getattr(fake.registered_fake(provider), "demo", None)
    if demo is not None:  # its demo says what else it needs (S3, a server of its own...)
        processor = dict(stack.enter_context(demo(base_url, n_rows)))
        base_url = str(processor.get("base_url", base_url))  # a server of its own?
    return base_url, processor


if __name__ == "__main__":
    sys.exit(main())
