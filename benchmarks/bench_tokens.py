"""Token-counting benchmark: time and peak RSS of ``count_text`` on texts of one size.

Usage:
    python benchmarks/bench_tokens.py [--mb 20] [--encoding o200k_base] [--repeat 1]
        [--cases words,unbroken,base64] [--check]

Each case counts one text of ``--mb`` million characters with
:func:`mmirage_beam.providers.tokens.count_text`, in a fresh Python process of its own, so
its peak RSS is its own:

- ``words``: the bundled GSM8K questions and answers
  (``mmirage_beam/examples/data/gsm8k/test.jsonl``), one after the other, cycled to the
  size: real prose with spaces, newlines and numbers.
- ``unbroken``: ``"x" * N``, one run without whitespace or punctuation (tiktoken's BPE is
  super-linear on such a run: 16.7 s and 1.06 GB for 20 MB before the counting was made
  piecewise).
- ``base64``: base64 of seeded random bytes, as a blob pasted into a text column.

For each case the child process reports the wall time of the count alone (the encoding
is loaded and the text built before the clock starts), the peak RSS of the whole process
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``: the interpreter, the encoding, the text
and the count), the token count, and whether the count is exact (the label
:func:`mmirage_beam.providers.tokens.text_tokens` gives; ``n/a`` on a version without it).
The table ends with each case's time as a multiple of ``words``' time. Run it on another
tree with ``PYTHONPATH=<tree>`` to compare versions. ``--check`` exits 1 unless
``unbroken`` takes at most twice ``words``' time and every case peaks under 300 MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GSM8K = REPO / "mmirage_beam" / "examples" / "data" / "gsm8k" / "test.jsonl"
CASES = ("words", "unbroken", "base64")


def make_text(case: str, chars: int) -> str:
    """The text of ``case``, exactly ``chars`` characters long."""
    if case == "words":
        with GSM8K.open(encoding="utf-8") as f:
            rows = [json.loads(ln) for ln in f if ln.strip()]
        base = "\n".join(f"{r['question']}\n{r['answer']}" for r in rows) + "\n"
        return (base * (chars // len(base) + 1))[:chars]
    if case == "unbroken":
        return "x" * chars
    if case == "base64":
        import base64
        import random

        raw = random.Random(0).randbytes(chars * 3 // 4 + 3)
        return base64.b64encode(raw).decode("ascii")[:chars]
    raise SystemExit(f"unknown case {case!r} (one of {', '.join(CASES)})")


def child(case: str, chars: int, encoding: str) -> None:
    """Count one text and print the figures as one JSON line (run in its own process)."""
    import resource

    try:
        from mmirage_beam.providers import tokens
    except ImportError:  # a version from before the helpers moved out of costs/
        from mmirage_beam.costs import tokens

    tokens.count_text("warm up", encoding)  # the encoding is loaded before the clock
    text = make_text(case, chars)
    start = time.perf_counter()
    labelled = getattr(tokens, "text_tokens", None)
    if labelled is not None:
        result = labelled(text, encoding)
        count, exact = result.tokens, result.exact
    else:
        count, exact = tokens.count_text(text, encoding), None
    secs = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(
        json.dumps(
            {
                "case": case,
                "secs": secs,
                "peak_mib": peak_kib / 1024,
                "tokens": count,
                "exact": exact,
                "code": os.path.dirname(os.path.dirname(tokens.__file__)),
            }
        )
    )


def measure(case: str, chars: int, encoding: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (env.get("PYTHONPATH", ""), str(REPO)) if p
    )  # a PYTHONPATH given by the caller comes first: the tree it names is measured
    proc = subprocess.run(
        [sys.executable, __file__, "--child", case, "--chars", str(chars), "--encoding", encoding],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"case {case} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=20.0, help="text size, millions of characters")
    ap.add_argument("--encoding", default="o200k_base")
    ap.add_argument("--repeat", type=int, default=1, help="runs per case (the fastest is kept)")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument(
        "--check",
        action="store_true",
        help="exit 1 unless unbroken takes at most 2x words' time and every case peaks "
        "under 300 MiB (issue 18's bound)",
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--chars", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.chars, args.encoding)
        return 0
    chars = int(args.mb * 1_000_000)
    print(f"count_text of {chars:,} characters, {args.encoding}, best of {args.repeat}")
    results = []
    for case in args.cases.split(","):
        runs = [measure(case, chars, args.encoding) for _ in range(args.repeat)]
        results.append(min(runs, key=lambda r: r["secs"]))
    base = next((r["secs"] for r in results if r["case"] == "words"), None)
    print(f"code measured: {results[0]['code']}")
    print()
    print("| case | time (s) | peak RSS (MiB) | tokens | exact | time / words |")
    print("|---|---:|---:|---:|---|---:|")
    for r in results:
        ratio = f"{r['secs'] / base:.2f}x" if base else "n/a"
        exact = "n/a" if r["exact"] is None else ("yes" if r["exact"] else "estimate")
        print(
            f"| {r['case']} | {r['secs']:.2f} | {r['peak_mib']:.0f} | {r['tokens']:,} "
            f"| {exact} | {ratio} |"
        )
    if args.check:
        failed = [
            f"{r['case']}: {r['secs'] / base:.2f}x words' time (at most 2x)"
            for r in results
            if base and r["case"] == "unbroken" and r["secs"] > 2 * base
        ] + [
            f"{r['case']}: peak RSS {r['peak_mib']:.0f} MiB (under 300)"
            for r in results
            if r["peak_mib"] >= 300
        ]
        print("\ncheck: " + ("; ".join(failed) if failed else "ok"))
        return 1 if failed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
