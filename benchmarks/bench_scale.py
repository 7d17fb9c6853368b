"""Scale benchmark: mmirage's dry run, submit and merge against plain Python, in one run.

Usage:
    python benchmarks/bench_scale.py [--rows 200000,1000000] [--repeat K] [--images K]
        [--image-side PX] [--max-chunk-bytes B] [--image-max-chunk-bytes B]
        [--workdir DIR] [--keep] [--no-submit] [--shipped no|also|only]
        [extra Beam options]

Text inputs are made from the bundled GSM8K rows (``mmirage_beam/examples/data/gsm8k/
*.jsonl``): N rows with distinct ids (``gsm8k-<n>``), the real questions and answers
cycled, so lengths vary as in the data. One OpenAI output per row whose prompt holds
the question and the reference solution. For every size, and ``--repeat`` times, these
cases run interleaved, each in its own process:

1. ``minimal loop``: read JSONL, JMESPath extract, Jinja2 render, ``json.dumps`` of the
   OpenAI request line, greedy chunking by bytes and count; writes only the export.
2. ``floor tokens``: the minimal loop plus the input-token count of every request as
   the cost estimate counts it (the same request dict, ``TokenCounter("openai",
   model).count``: tiktoken ``o200k_base`` over the same text, the same chat overhead);
   its total is checked against the dry run's exact estimate.
3. ``full loop``: the same plus every file the dry run writes: export lines
   ``{"batch_id", "request"}``, a receipt per chunk (``custom_id_to_source_index``,
   ``request_hash``, ``request_hashes``), placeholder rows rendered from
   ``output_schema``, the invalid-rows file (when a row is invalid).
4. ``dry run``: ``mmirage run --export-prompts`` on the DirectRunner (in-memory).
   ``dry run (sample)``: the same with ``--estimate sample`` (1% of the requests
   counted, more below 20,000 rows: :func:`sample_fraction`; skipped when the mmirage
   under test has no ``--estimate``); its export is checked identical to the exact dry
   run's and its estimate within its stated bound of the floor's exact total.
5. ``submit``: ``mmirage run`` to the embedded fake provider (started here on
   127.0.0.1, batches complete 1 s after creation); then, untimed, ``mmirage check
   --watch`` until every batch has completed.
6. ``merge``: ``mmirage merge`` of that run.
7. ``dict join``: plain Python doing merge's work: fetch the result files from the fake
   over HTTP, re-read the source rows and verify each request's hash against the
   receipts, join by source_index with a dict, render ``output_schema``, write the
   merged JSONL in order.

Each case is measured from outside: wall time, CPU time (user + system of the process
and the descendants it waited for, from ``os.wait4``) and the peak RSS of the whole
process tree (psutil, every 50 ms, the sum over the process and all its descendants).
The outputs are cross-checked: the dry run's request lines and placeholder rows against
the full loop's (as multisets), the merged file against the dict join's (byte for byte),
the dry run's chunk count against the greedy minimum plus the chunking shards.

``--shipped also`` (or ``only``, without the cases above) adds the shipped two-output
config, ``configs/gsm8k_openai.yaml`` (``solution``, plain; ``grading``, JSON with an
``output_schema``; 500 requests per chunk), over the same rows: ``2 outputs: minimal
loop`` and ``2 outputs: floor tokens`` do the minimal loop and the token count for both
outputs (the JSON one's request with its ``response_format``, each output chunked
apart), against ``2 outputs: dry run`` and ``2 outputs: dry run (sample)``. Checked:
the dry run's request lines against the loop's (as multisets), its total input tokens
against the floor's count, the sampled run's export against the exact one's.

A multimodal case (``--images K`` rows, 0 to skip) references large photographs made
from the repository's real ones (upscaled and re-encoded as JPEG with Pillow into the
work folder) and reports the dry run's request bytes, chunks and peak RSS against
``max_chunk_bytes``.

Prints a Markdown report at the end, also written to ``<workdir>/bench.md`` (after each
size too, so an interrupted run leaves what it measured); exits 1 when a cross-check
fails. Everything started here (the fake provider, the case being measured) is stopped
at the end, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import glob
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator, Optional

REPO = Path(__file__).resolve().parent.parent
GSM8K_GLOB = str(REPO / "mmirage_beam" / "examples" / "data" / "gsm8k" / "*.jsonl")
PHOTOS = [
    REPO / "mmirage_beam" / "examples" / "data" / "images" / name
    for name in (
        "astronaut.png",
        "chelsea.png",
        "coffee.png",
        "rocket.jpg",
        "hubble_deep_field.jpg",
        "china.jpg",
        "flower.jpg",
    )
] + [REPO / "tests" / "data" / "images" / "astronaut_large_noisy.png"]
SHIPPED_GSM8K = REPO / "configs" / "gsm8k_openai.yaml"
VISION_QUESTIONS = REPO / "mmirage_beam" / "examples" / "data" / "images" / "vision_questions.jsonl"

MODEL = "gpt-4.1-mini"
OUTPUT = "review"
PROMPT = (
    "Check this solution to a grade-school maths problem and say whether its final "
    "answer is right.\n\nProblem: {{ question }}\n\nSolution: {{ reference }}"
)
INPUTS = [("id", "id"), ("question", "question"), ("reference", "answer")]
SCHEMA = {"id": "{{ id }}", "question": "{{ question }}", OUTPUT: "{{ " + OUTPUT + " }}"}
MAX_REQUESTS_PER_CHUNK = 50_000
DEFAULT_MAX_CHUNK_BYTES = 52_428_800  # 50 MiB, mmirage's default
FAKE_KEY = "sk-bench-fake"
POLL_SECS = 0.05  # peak-RSS sampling interval, in seconds
CHILDREN_SCAN_SECS = 0.5  # how often the list of descendants is refreshed, in seconds
MiB = 1024 * 1024

CASES = (
    "minimal loop",
    "floor tokens",
    "full loop",
    "dry run",
    "dry run (sample)",
    "submit",
    "merge",
    "dict join",
)
# ``--shipped``: the shipped two-output GSM8K config and its floors (same two outputs).
SHIPPED_CASES = (
    "2 outputs: minimal loop",
    "2 outputs: floor tokens",
    "2 outputs: dry run",
    "2 outputs: dry run (sample)",
)

# Everything started here that must not outlive the benchmark.
_LIVE: list[subprocess.Popen] = []


# --------------------------------------------------------------------------- inputs


def gsm8k_lines() -> list[dict[str, Any]]:
    """Every row of the bundled GSM8K files (train, then test, when both are there)."""
    files = sorted(glob.glob(GSM8K_GLOB), key=lambda p: (Path(p).name != "train.jsonl", p))
    rows = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            rows.extend(json.loads(ln) for ln in f if ln.strip())
    if not rows:
        sys.exit(f"no GSM8K rows found under {GSM8K_GLOB}")
    return rows


def make_text_rows(n: int, path: Path) -> None:
    """``n`` rows ``{"id", "question", "answer"}``, ids distinct, the real rows cycled."""
    base = gsm8k_lines()
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            row = base[i % len(base)]
            line = {"id": f"gsm8k-{i:08d}", "question": row["question"], "answer": row["answer"]}
            f.write(json.dumps(line, ensure_ascii=False) + "\n")


def make_photos(folder: Path, side_px: int) -> list[Path]:
    """The repository's photographs upscaled (long side ``side_px``) and saved as JPEG."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for src in PHOTOS:
        with Image.open(src) as im:
            im = im.convert("RGB")
            scale = side_px / max(im.size)
            big = im.resize(
                (max(1, round(im.width * scale)), max(1, round(im.height * scale))),
                Image.Resampling.LANCZOS,
            )
        dst = folder / f"{src.stem}_{side_px}.jpg"
        big.save(dst, "JPEG", quality=95)
        out.append(dst)
    return out


def make_image_rows(n: int, photos: list[Path], path: Path) -> None:
    """``n`` rows ``{"id", "image", "question"}`` cycling over ``photos``."""
    with VISION_QUESTIONS.open(encoding="utf-8") as f:
        questions = [json.loads(ln)["question"] for ln in f if ln.strip()]
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            row = {
                "id": f"img-{i:06d}",
                "image": photos[i % len(photos)].name,
                "question": questions[i % len(questions)],
            }
            f.write(json.dumps(row) + "\n")


def text_config(case_dir: Path, rows: Path, max_chunk_bytes: int, base_url: str = "") -> dict:
    proc: dict[str, Any] = {
        "type": "batch_api",
        "provider": "openai",
        "model": MODEL,
        "max_chunk_bytes": max_chunk_bytes,
        "max_requests_per_chunk": MAX_REQUESTS_PER_CHUNK,
        "metadata_output_path": str(case_dir / "meta" / "batch_metadata.jsonl"),
    }
    if base_url:
        proc["base_url"] = base_url
    return {
        "processors": [proc],
        "loading_params": {
            "datasets": [
                {"path": str(rows), "type": "JSONL", "output_dir": str(case_dir / "shards")}
            ]
        },
        "processing_params": {
            "inputs": [{"name": n, "key": k} for n, k in INPUTS],
            "outputs": [
                {"name": OUTPUT, "type": "batch_api", "output_type": "plain", "prompt": PROMPT}
            ],
            "remove_columns": True,
            "output_schema": SCHEMA,
        },
        "execution_params": {"mode": "local"},
    }


def image_config(case_dir: Path, rows: Path, images: Path, max_chunk_bytes: int) -> dict:
    return {
        "processors": [
            {
                "type": "batch_api",
                "provider": "openai",
                "model": MODEL,
                "max_chunk_bytes": max_chunk_bytes,
                "metadata_output_path": str(case_dir / "meta" / "batch_metadata.jsonl"),
            }
        ],
        "loading_params": {
            "datasets": [
                {
                    "path": str(rows),
                    "type": "JSONL",
                    "output_dir": str(case_dir / "shards"),
                    "image_base_path": str(images),
                }
            ]
        },
        "processing_params": {
            "inputs": [
                {"name": "id", "key": "id"},
                {"name": "question", "key": "question"},
                {"name": "image", "key": "image", "type": "image"},
            ],
            "outputs": [
                {
                    "name": "caption",
                    "type": "batch_api",
                    "output_type": "plain",
                    "prompt": "Look at the image and answer briefly: {{ question }}",
                }
            ],
            "remove_columns": True,
            "output_schema": {"id": "{{ id }}", "caption": "{{ caption }}"},
        },
        "execution_params": {"mode": "local"},
    }


def shipped_config(case_dir: Path, rows: Path) -> dict:
    """``configs/gsm8k_openai.yaml`` as shipped (two outputs: ``solution``, plain, and
    ``grading``, JSON with an ``output_schema``; 500 requests per chunk) reading ``rows``
    and writing under ``case_dir``."""
    import yaml

    cfg = yaml.safe_load(SHIPPED_GSM8K.read_text(encoding="utf-8"))
    cfg["processors"][0]["metadata_output_path"] = str(case_dir / "meta" / "batch_metadata.jsonl")
    cfg["loading_params"]["state_dir"] = str(case_dir / "state")
    (ds,) = cfg["loading_params"]["datasets"]
    ds.update(path=str(rows), output_dir=str(case_dir / "shards"))
    return cfg


def shipped_loop_spec(cfg: dict, rows: Path, export: Path) -> dict:
    """What the two-output loops need of the shipped config."""
    proc = cfg["processors"][0]
    pp = cfg["processing_params"]
    return {
        "rows": str(rows),
        "model": proc["model"],
        "max_chunk_bytes": proc["max_chunk_bytes"],
        "max_requests_per_chunk": proc["max_requests_per_chunk"],
        "inputs": [(i["name"], i["key"]) for i in pp["inputs"]],
        "outputs": [
            {"name": o["name"], "prompt": o["prompt"], "output_schema": o.get("output_schema")}
            for o in pp["outputs"]
        ],
        "export": str(export),
    }


def write_yaml(path: Path, data: dict) -> Path:
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- measuring


class Measured:
    """One measured process: wall and CPU seconds, peak RSS of its tree in bytes."""

    def __init__(self, wall: float, cpu: float, peak_rss: int, stdout: str) -> None:
        self.wall = wall
        self.cpu = cpu
        self.peak_rss = peak_rss
        self.stdout = stdout


def _rss_sum(members: list) -> int:
    import psutil

    total = 0
    for p in members:
        try:
            total += p.memory_info().rss
        except psutil.Error:  # ended since the last scan
            pass
    return total


def measure(cmd: list[str], cwd: Path, env: Optional[dict] = None, label: str = "") -> Measured:
    """Run ``cmd``; sample the RSS of its process tree every :data:`POLL_SECS` (the list
    of descendants is refreshed every :data:`CHILDREN_SCAN_SECS`).

    Exits the benchmark with the command's output if it fails.
    """
    import psutil

    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        _LIVE.append(proc)
        peak = [0]
        done = threading.Event()

        def poll() -> None:
            # Listing descendants scans every process of the machine: do it every
            # CHILDREN_SCAN_SECS; read the RSS of the known members every POLL_SECS.
            try:
                ps = psutil.Process(proc.pid)
            except psutil.Error:
                return
            members, next_scan = [ps], 0.0
            while not done.is_set():
                now = time.monotonic()
                if now >= next_scan:
                    try:
                        members = [ps] + ps.children(recursive=True)
                    except psutil.Error:
                        pass
                    next_scan = now + CHILDREN_SCAN_SECS
                peak[0] = max(peak[0], _rss_sum(members))
                done.wait(POLL_SECS)

        watcher = threading.Thread(target=poll, daemon=True)
        watcher.start()
        try:
            _pid, status, usage = os.wait4(proc.pid, 0)
        finally:
            done.set()
        wall = time.perf_counter() - start
        watcher.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        _LIVE.remove(proc)
        out.seek(0)
        log = out.read().decode("utf-8", "replace")
    if proc.returncode != 0:
        sys.exit(
            f"benchmark case {label!r} failed (exit {proc.returncode}): {' '.join(cmd)}\n{log}"
        )
    return Measured(wall, usage.ru_utime + usage.ru_stime, peak[0], log)


# --------------------------------------------------------------------------- the loops
# Run in their own process: ``bench_scale.py --case minimal|tokens|full|dictjoin SPEC.json``.


def _compile_schema(schema: dict) -> Any:
    """``output_schema`` of bare ``{{ expr }}`` strings -> a function of the row values."""
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
    exprs = [(k, env.compile_expression(v.strip()[2:-2].strip())) for k, v in schema.items()]
    return lambda ctx: {k: e(**ctx) for k, e in exprs}


def sample_fraction(rows: int) -> float:
    """``--estimate-fraction`` of the sampled dry run: 1%, or enough for about 200
    sampled requests in a small run (a bound needs a few)."""
    return min(1.0, max(0.01, round(200 / rows, 4)))


def _loop_requests(spec: dict):
    """Yield ``(source_index, values, request dict, line bytes)`` for every row."""
    import jinja2
    import jmespath

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
    tmpl = env.from_string(spec["prompt"])
    exprs = [(name, jmespath.compile(key)) for name, key in spec["inputs"]]
    model, output = spec["model"], spec["output"]
    with open(spec["rows"], encoding="utf-8") as f:
        i = 0
        for raw in f:
            if not raw.strip():
                continue
            row = json.loads(raw)
            values = {name: e.search(row) for name, e in exprs}
            missing = [n for n, v in values.items() if v is None]
            if missing:
                yield i, values, None, f"input {missing[0]!r} is missing"
                i += 1
                continue
            prompt = tmpl.render(**values)
            if not prompt.strip():
                yield i, values, None, "the prompt renders to whitespace only"
                i += 1
                continue
            cid = f"{output}-text-{i}"
            req = {
                "custom_id": cid,
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": model, "messages": [{"role": "user", "content": prompt}]},
            }
            line = (json.dumps(req, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
            yield i, values, req, line
            i += 1


def _line_hash(req: dict) -> str:
    text = json.dumps(req, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def run_loop(spec: dict, full: bool, count_tokens: bool = False) -> dict:
    """The plain-Python dry run. Returns counts (rows, requests, chunks, request bytes,
    and with ``full`` or ``count_tokens`` input_tokens). ``count_tokens`` alone: the
    minimal loop plus the token count (``floor tokens``)."""
    max_bytes, max_n = spec["max_chunk_bytes"], spec["max_requests_per_chunk"]
    output, run_id = spec["output"], spec["run_id"]
    export = open(spec["export"], "wb")  # noqa: SIM115
    receipts = placeholders = invalid = None
    if full:
        Path(spec["receipts"]).parent.mkdir(parents=True, exist_ok=True)
        Path(spec["placeholders"]).parent.mkdir(parents=True, exist_ok=True)
        receipts = open(spec["receipts"], "w", encoding="utf-8")  # noqa: SIM115
        placeholders = open(spec["placeholders"], "wb")  # noqa: SIM115
        render = _compile_schema(spec["schema"])
    tokens = None
    totals_tokens = 0
    if full or count_tokens:
        # The dry run counts every request's input tokens (its cost estimate); so do
        # the like-for-like loops, with the same tokenizer package and the same rules.
        from mmirage_beam.costs.tokens import TokenCounter

        tokens = TokenCounter("openai", spec["model"])
    chunk_no, cur_bytes, cur = 1, 0, []  # cur: (cid, source_index, req) of the open chunk
    totals = {"rows": 0, "requests": 0, "chunks": 0, "request_bytes": 0, "invalid": 0}

    def flush(reason: str) -> None:
        totals["chunks"] += 1
        if not full:
            return
        text = json.dumps([r for _c, _i, r in cur], sort_keys=True, separators=(",", ":"))
        receipt = {
            "provider": "openai",
            "chunk_id": f"{output}-chunk-{chunk_no:06d}",
            "provider_batch_id": f"dry-run-text-{output}-chunk-{chunk_no:06d}",
            "status": "dry_run",
            "custom_id_to_source_index": {c: i for c, i, _r in cur},
            "request_hash": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            "request_hashes": {c: _line_hash(r) for c, _i, r in cur},
            "model_params_snapshot": {"output_name": output, "output_type": "plain"},
            "submitted_request_count": len(cur),
            "total_bytes": cur_bytes,
            "has_oversized_request": False,
            "flush_reason": reason,
            "submitted_at_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(),
            "run_id": run_id,
            "output_name": output,
            "modality": "text",
            "attempt": 1,
        }
        receipts.write(json.dumps(receipt) + "\n")

    for i, values, req, line in _loop_requests(spec):
        totals["rows"] += 1
        if req is None:
            totals["invalid"] += 1
            if full:
                if invalid is None:
                    invalid = open(spec["invalid"], "w", encoding="utf-8")  # noqa: SIM115
                err = {"source_index": i, "dataset": spec["rows"], "reason": line}
                invalid.write(json.dumps(err, ensure_ascii=False) + "\n")
            continue
        n = len(line)
        if cur and (cur_bytes + n > max_bytes or len(cur) >= max_n):
            flush("full_chunk" if cur_bytes + n > max_bytes else "max_requests")
            chunk_no, cur_bytes, cur = chunk_no + 1, 0, []
        # Only the full loop needs the chunk's requests (its receipt); the minimal loop
        # keeps their count.
        cur.append((req["custom_id"], i, req) if full else None)
        cur_bytes += n
        totals["requests"] += 1
        totals["request_bytes"] += n
        batch = f"text-{output}-chunk-{chunk_no:06d}"
        export.write(b'{"batch_id":"' + batch.encode() + b'","request":' + line[:-1] + b"}\n")
        if tokens is not None:
            totals_tokens += tokens.count(req).input_tokens
        if full:
            ctx = dict(values)
            ctx[output] = f"__BATCH_SUBMITTED__:{req['custom_id']}"
            row = render(ctx)
            row["source_index"] = i
            placeholders.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))
    if cur:
        flush("end_of_input")
    if tokens is not None:
        totals["input_tokens"] = totals_tokens
    for f in (export, receipts, placeholders, invalid):
        if f is not None:
            f.close()
    return totals


def _http_json(url: str) -> dict:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {FAKE_KEY}"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def run_dict_join(spec: dict) -> dict:
    """Merge's work in plain Python: fetch, verify, join by source_index, ordered write."""
    base = spec["base_url"].rstrip("/")
    cid_to_index: dict[str, int] = {}
    hashes: dict[str, str] = {}
    batches = []
    with open(spec["receipts"], encoding="utf-8") as f:
        for ln in f:
            r = json.loads(ln)
            cid_to_index.update(r["custom_id_to_source_index"])
            hashes.update(r.get("request_hashes") or {})
            batches.append(r["provider_batch_id"])
    results: dict[int, tuple] = {}  # source_index -> (text, tokens in, tokens out, error)
    for batch_id in batches:
        batch = _http_json(f"{base}/batches/{batch_id}")
        for key in ("output_file_id", "error_file_id"):
            fid = batch.get(key)
            if not fid:
                continue
            req = urllib.request.Request(
                f"{base}/files/{fid}/content", headers={"Authorization": f"Bearer {FAKE_KEY}"}
            )
            with urllib.request.urlopen(req, timeout=120) as stream:
                for raw in stream:  # binary readline: split on b"\n" only
                    if not raw.strip():
                        continue
                    res = json.loads(raw)
                    si = cid_to_index[res["custom_id"]]
                    resp = res.get("response") or {}
                    body = resp.get("body") or {}
                    usage = body.get("usage") or {}
                    if resp.get("status_code") == 200 and body.get("choices"):
                        text = body["choices"][0]["message"]["content"]
                        err = None
                    else:
                        text, err = None, res.get("error") or body.get("error") or {}
                    results[si] = (
                        text,
                        usage.get("prompt_tokens"),
                        usage.get("completion_tokens"),
                        err,
                    )
    render = _compile_schema(spec["schema"])
    output = spec["output"]
    written = changed = failed = 0
    with open(spec["output_path"], "wb") as out, open(spec["errors_path"], "wb") as errors:
        for i, values, req, _line in _loop_requests(spec):
            res = results.get(i)
            if res is None:
                continue
            text, tin, tout, err = res
            if req is not None and hashes.get(req["custom_id"]) not in (None, _line_hash(req)):
                changed += 1
                text, err = None, {"type": "source_changed"}
            ctx = dict(values)
            ctx[output] = text
            row = render(ctx)
            row["source_index"] = i
            if tin is not None:
                row["input_tokens"] = int(tin)
                row["output_tokens"] = int(tout or 0)
            if err is not None:
                failed += 1
                row["mmirage_errors"] = {output: err}
                line = {"source_index": i, "output_name": output, "error": err}
                errors.write((json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8"))
            out.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))
            written += 1
    return {"rows": written, "changed": changed, "failed": failed, "results": len(results)}


_JSON_TYPES = {"string": "string", "number": "number", "integer": "integer", "boolean": "boolean"}
_JSON_BOUNDS = {"number": ("minimum", "maximum"), "integer": ("minimum", "maximum")}


def _json_schema(output_schema: dict) -> dict:
    """``output_schema`` of a JSON output (``field: type`` or ``field: {type, min, max}``,
    scalar types only: what the shipped GSM8K config uses) -> the JSON schema the
    OpenAI request carries. The dry run's export is checked against the loop's, so a
    difference here shows as a failed check."""
    props = {}
    for name, decl in output_schema.items():
        if not isinstance(decl, dict):
            decl = {"type": decl or "string"}
        t = _JSON_TYPES[str(decl.get("type", "string")).lower()]
        field: dict[str, Any] = {"type": t}
        for bound, key in zip(("min", "max"), _JSON_BOUNDS.get(t, ())):
            if bound in decl:
                field[key] = decl[bound] if t == "number" else int(decl[bound])
        props[name] = field
    return {
        "type": "object",
        "properties": props,
        "required": list(props),
        "additionalProperties": False,
    }


def run_outputs_loop(spec: dict, count_tokens: bool) -> dict:
    """The minimal loop over several outputs (``spec["outputs"]``: name, prompt and, for a
    JSON output, its ``output_schema``): read, extract, render every output's prompt,
    encode its OpenAI request line (a JSON output with its ``response_format``), chunk each
    output greedily by bytes and count, write the export; with ``count_tokens`` also
    every request's input tokens as the dry run's estimate counts them."""
    import jinja2
    import jmespath

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
    exprs = [(name, jmespath.compile(key)) for name, key in spec["inputs"]]
    model = spec["model"]
    max_bytes, max_n = spec["max_chunk_bytes"], spec["max_requests_per_chunk"]
    outs = []
    for o in spec["outputs"]:
        fmt = None
        if o.get("output_schema"):
            fmt = {
                "type": "json_schema",
                "json_schema": {
                    "name": o["name"],
                    "strict": True,
                    "schema": _json_schema(o["output_schema"]),
                },
            }
        # Per output: template, response_format, [chunk number, bytes, requests] of its
        # open chunk.
        outs.append((o["name"], env.from_string(o["prompt"]), fmt, [1, 0, 0]))
    tokens = None
    if count_tokens:
        from mmirage_beam.costs.tokens import TokenCounter

        tokens = TokenCounter("openai", model)
    totals = {"rows": 0, "requests": 0, "chunks": 0, "request_bytes": 0, "invalid": 0}
    input_tokens = 0
    with open(spec["rows"], encoding="utf-8") as f, open(spec["export"], "wb") as export:
        i = 0
        for raw in f:
            if not raw.strip():
                continue
            row = json.loads(raw)
            totals["rows"] += 1
            values = {name: e.search(row) for name, e in exprs}
            if any(v is None for v in values.values()):
                totals["invalid"] += 1
                i += 1
                continue
            for name, tmpl, fmt, chunk in outs:
                body: dict[str, Any] = {
                    "model": model,
                    "messages": [{"role": "user", "content": tmpl.render(**values)}],
                }
                if fmt is not None:
                    body["response_format"] = fmt
                req = {
                    "custom_id": f"{name}-text-{i}",
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": body,
                }
                line = json.dumps(req, ensure_ascii=False, separators=(",", ":")).encode()
                n = len(line) + 1
                if chunk[2] and (chunk[1] + n > max_bytes or chunk[2] >= max_n):
                    totals["chunks"] += 1
                    chunk[:] = [chunk[0] + 1, 0, 0]
                chunk[1] += n
                chunk[2] += 1
                totals["requests"] += 1
                totals["request_bytes"] += n
                batch = f"text-{name}-chunk-{chunk[0]:06d}".encode()
                export.write(b'{"batch_id":"' + batch + b'","request":' + line + b"}\n")
                if tokens is not None:
                    input_tokens += tokens.count(req).input_tokens
            i += 1
    totals["chunks"] += sum(1 for _n, _t, _f, chunk in outs if chunk[2])
    if tokens is not None:
        totals["input_tokens"] = input_tokens
    return totals


def case_main(kind: str, spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    if kind == "dictjoin":
        totals = run_dict_join(spec)
    elif kind in ("outputs-minimal", "outputs-tokens"):
        totals = run_outputs_loop(spec, count_tokens=(kind == "outputs-tokens"))
    else:
        totals = run_loop(spec, full=(kind == "full"), count_tokens=(kind == "tokens"))
    print("BENCH-RESULT " + json.dumps(totals))
    return 0


def _case_result(m: Measured) -> dict:
    for line in reversed(m.stdout.splitlines()):
        if line.startswith("BENCH-RESULT "):
            return json.loads(line[len("BENCH-RESULT ") :])
    sys.exit(f"no result line in:\n{m.stdout}")


# --------------------------------------------------------------------------- checks


def multiset_digest(lines: Any) -> tuple[int, int]:
    """(count, order-independent digest) of byte lines: the sum of their 64-bit hashes."""
    n = total = 0
    for ln in lines:
        n += 1
        total = (total + int.from_bytes(hashlib.blake2b(ln, digest_size=8).digest(), "big")) % (
            1 << 64
        )
    return n, total


def export_requests(path: Path) -> Iterator[bytes]:
    """The ``request`` part of every export line ``{"batch_id":...,"request":...}``, as
    its exact bytes (so chunk boundaries, which may move, do not matter)."""
    with path.open("rb") as f:
        for ln in f:
            yield ln.partition(b',"request":')[2].rstrip(b"\n")[:-1]


def export_batch_ids(path: Path) -> set[bytes]:
    """The distinct ``batch_id`` parts of an export: one per chunk."""
    ids = set()
    with path.open("rb") as f:
        for ln in f:
            ids.add(ln[: ln.find(b',"request"')])
    return ids


def file_lines(paths: list[Path]) -> Iterator[bytes]:
    for p in paths:
        with p.open("rb") as f:
            yield from f


def receipts_summary(path: Path) -> dict[str, int]:
    """Chunks, requests, request bytes and the largest chunk of a receipts file."""
    chunks = requests = max_bytes = max_count = total = 0
    with path.open(encoding="utf-8") as f:
        for ln in f:
            r = json.loads(ln)
            chunks += 1
            requests += r["submitted_request_count"]
            total += r["total_bytes"]
            max_bytes = max(max_bytes, r["total_bytes"])
            max_count = max(max_count, r["submitted_request_count"])
    return {
        "chunks": chunks,
        "requests": requests,
        "request_bytes": total,
        "max_chunk_total_bytes": max_bytes,
        "max_chunk_requests": max_count,
    }


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def count_lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


# --------------------------------------------------------------------------- fake provider


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Fake:
    """The embedded fake provider as a process of its own on 127.0.0.1."""

    def __init__(self, log: Path, delay_secs: float = 1.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mmirage_beam.testing.fake_provider",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--delay",
                str(delay_secs),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        _LIVE.append(self.proc)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/_fake/state", timeout=2):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    sys.exit(f"the fake provider did not start; see {log}")
                time.sleep(0.2)

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    def stop(self) -> None:
        _stop(self.proc)
        self._log.close()


def _stop(proc: subprocess.Popen) -> None:
    if proc.returncode is None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc in _LIVE:
        _LIVE.remove(proc)


# --------------------------------------------------------------------------- the benchmark


def _mmirage(*args: str) -> list[str]:
    module = {"run": "pipelines.submit", "merge": "pipelines.merge", "check": "pipelines.check"}
    return [sys.executable, "-m", module[args[0]], *args[1:]]


def _rm(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists():
        path.unlink()


class Bench:
    def __init__(self, args: argparse.Namespace, beam_args: list[str], work: Path) -> None:
        self.args = args
        self.beam_args = beam_args
        self.work = work
        self.results: dict[tuple[int, str], list[Measured]] = {}
        self.info: dict[int, dict[str, Any]] = {}
        self.image: dict[str, Any] = {}
        self.env = dict(os.environ, OPENAI_API_KEY=FAKE_KEY)

    def log(self, msg: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def record(self, n: int, case: str, m: Measured) -> None:
        self.results.setdefault((n, case), []).append(m)
        self.log(
            f"{n:>9,} rows  {case:<16} wall {m.wall:8.2f} s  CPU {m.cpu:8.2f} s  "
            f"peak RSS {m.peak_rss / MiB:8.1f} MiB"
        )

    def measure_dry_run(
        self, n: int, cfg: Path, case_dir: Path, run_id: str, sample: bool, case: str
    ) -> Measured:
        """``mmirage run --config cfg --export-prompts <case_dir>/prompts.jsonl`` (with
        ``sample``: ``--estimate sample`` at :func:`sample_fraction` of ``n``), measured
        in ``case_dir`` and recorded as ``case``."""
        extra = (
            ["--estimate", "sample", "--estimate-fraction", f"{sample_fraction(n):g}"]
            if sample
            else []
        )
        export = str(case_dir / "prompts.jsonl")
        command = _mmirage("run", "--config", str(cfg), "--export-prompts", export)
        command += ["--run-id", run_id, *extra, *self.beam_args]
        m = measure(command, case_dir, env=self.env, label=case)
        self.record(n, case, m)
        return m

    def loop_spec(self, n: int, rows: Path, case_dir: Path, run_id: str) -> Path:
        meta = case_dir / "meta"
        spec = {
            "rows": str(rows),
            "prompt": PROMPT,
            "inputs": INPUTS,
            "model": MODEL,
            "output": OUTPUT,
            "schema": SCHEMA,
            "run_id": run_id,
            "max_chunk_bytes": self.args.max_chunk_bytes,
            "max_requests_per_chunk": MAX_REQUESTS_PER_CHUNK,
            "export": str(case_dir / f"prompts.{run_id}.jsonl"),
            "receipts": str(meta / f"batch_metadata.dry-run.text.{run_id}.jsonl"),
            "invalid": str(meta / f"batch_metadata.invalid_rows.{run_id}.jsonl"),
            "placeholders": str(
                case_dir / "shards" / "shard_0" / f"placeholders.{run_id}-00000-of-00001.jsonl"
            ),
        }
        case_dir.mkdir(parents=True, exist_ok=True)
        path = case_dir / "spec.json"
        path.write_text(json.dumps(spec), encoding="utf-8")
        return path

    def outputs_digest(self, case_dir: Path, run_id: str) -> dict:
        export = case_dir / f"prompts.{run_id}.jsonl"
        placeholders = sorted((case_dir / "shards" / "shard_0").glob(f"placeholders.{run_id}-*"))
        receipts = case_dir / "meta" / f"batch_metadata.dry-run.text.{run_id}.jsonl"
        invalid = case_dir / "meta" / f"batch_metadata.invalid_rows.{run_id}.jsonl"
        return {
            "export": multiset_digest(export_requests(export)),
            "export_chunks": len(export_batch_ids(export)),
            "placeholders": multiset_digest(file_lines(placeholders)),
            "receipts": receipts_summary(receipts) if receipts.exists() else None,
            "invalid_rows": count_lines(invalid) if invalid.exists() else 0,
        }

    def run_size(self, n: int, rep: int) -> None:
        size_dir = self.work / f"rows{n}"
        rows = size_dir / "rows.jsonl"
        info = self.info.setdefault(n, {"checks": []})
        if not rows.exists():
            size_dir.mkdir(parents=True, exist_ok=True)
            make_text_rows(n, rows)
            info["input_bytes"] = rows.stat().st_size
        if self.args.shipped != "only":
            self.run_one_output(n, rep, size_dir, rows)
        if self.args.shipped != "no":
            self.run_shipped(n, rep, size_dir, rows)

    def run_shipped(self, n: int, rep: int, size_dir: Path, rows: Path) -> None:
        """The shipped two-output config's dry runs (exact, sampled) and its floors."""
        a = self.args
        info = self.info[n]
        tag = f"r{rep}"
        exports = {}
        for kind, case in (("minimal", SHIPPED_CASES[0]), ("tokens", SHIPPED_CASES[1])):
            case_dir = size_dir / f"two-{kind}-{tag}"
            case_dir.mkdir(parents=True, exist_ok=True)
            spec = shipped_loop_spec(
                shipped_config(case_dir, rows), rows, case_dir / "prompts.jsonl"
            )
            spec_path = case_dir / "spec.json"
            spec_path.write_text(json.dumps(spec), encoding="utf-8")
            m = measure(
                [sys.executable, str(Path(__file__).resolve()), "--case", f"outputs-{kind}"]
                + [str(spec_path)],
                case_dir,
                label=case,
            )
            self.record(n, case, m)
            totals = _case_result(m)
            if kind == "minimal":
                info["two_greedy_chunks"] = totals["chunks"]
                info["two_requests"] = totals["requests"]
                exports["loop"] = multiset_digest(export_requests(Path(spec["export"])))
            else:
                info["two_floor_tokens"] = totals["input_tokens"]
            if not a.keep:
                _rm(case_dir)
        run_id = f"two{tag}"
        digests = {}
        for sample, case in ((False, SHIPPED_CASES[2]), (True, SHIPPED_CASES[3])):
            if sample and not self.has_sample_estimate():
                continue
            case_dir = size_dir / f"two-dry{'-sample' if sample else ''}-{tag}"
            cfg = write_yaml(case_dir / "gsm8k_openai.yaml", shipped_config(case_dir, rows))
            m = self.measure_dry_run(n, cfg, case_dir, run_id, sample, case)
            export = case_dir / f"prompts.{run_id}.jsonl"
            digests[sample] = sha256_file(export)
            if not sample:
                exports["dry"] = multiset_digest(export_requests(export))
                info["two_dry_chunks"] = len(export_batch_ids(export))
                got = _TOTAL_ESTIMATE.search(m.stdout)
                shown = int(got.group(1).replace(",", "")) if got else None
                floor = info.get("two_floor_tokens")
                ok_tokens = shown is not None and shown == floor
                ok_export = exports["dry"] == exports["loop"]
                self.check(
                    n,
                    f"{tag}: 2 outputs: dry run: {exports['dry'][0]:,} request lines "
                    f"{'identical to' if ok_export else 'DIFFER from'} the loop's (as a "
                    f"multiset); {info['two_dry_chunks']:,} chunks (greedy: "
                    f"{info['two_greedy_chunks']:,}); input tokens "
                    f"{shown if shown is None else f'{shown:,}'} "
                    f"{'equal' if ok_tokens else 'DIFFER from'} the floor's {floor:,}",
                )
                info.setdefault("two_ok", []).append(ok_export and ok_tokens)
            else:
                same = digests[True] == digests[False]
                self.check(
                    n,
                    f"{tag}: 2 outputs: dry run (sample): export "
                    f"{'byte-identical to' if same else 'DIFFERS from'} the exact dry run's",
                )
                info.setdefault("two_ok", []).append(same)
            if not a.keep:
                _rm(case_dir)

    def run_one_output(self, n: int, rep: int, size_dir: Path, rows: Path) -> None:
        """The one-output cases: the loops, the dry runs, submit, merge, dict join."""
        a = self.args
        info = self.info[n]
        tag = f"r{rep}"

        # 1, 2, 3: the loops.
        digests = {}
        loops = (("minimal", "minimal loop"), ("tokens", "floor tokens"), ("full", "full loop"))
        for kind, case in loops:
            case_dir = size_dir / f"{kind}-{tag}"
            run_id = f"loop{tag}"
            spec = self.loop_spec(n, rows, case_dir, run_id)
            m = measure(
                [sys.executable, str(Path(__file__).resolve()), "--case", kind, str(spec)],
                case_dir,
                label=case,
            )
            self.record(n, case, m)
            totals = _case_result(m)
            if kind == "minimal":
                info["greedy_chunks"] = totals["chunks"]
                info["request_bytes"] = totals["request_bytes"]
                info["requests"] = totals["requests"]
            elif kind == "tokens":
                info["floor_tokens"] = totals["input_tokens"]
            else:
                digests["full"] = self.outputs_digest(case_dir, run_id)
            if not a.keep:
                _rm(case_dir)

        # 3: the dry run.
        case_dir = size_dir / f"dry-{tag}"
        run_id = f"dry{tag}"
        cfg = write_yaml(case_dir / "dry.yaml", text_config(case_dir, rows, a.max_chunk_bytes))
        m = self.measure_dry_run(n, cfg, case_dir, run_id, False, "dry run")
        digests["dry"] = self.outputs_digest(case_dir, run_id)
        exact_export = case_dir / f"prompts.{run_id}.jsonl"
        self.check_exact_estimate(n, m.stdout, tag)
        self.check_dry_run(n, digests, tag)

        # 4b: the dry run with a sampled estimate (when this mmirage has one).
        if self.has_sample_estimate():
            sample_dir = size_dir / f"dry-sample-{tag}"
            cfg = write_yaml(
                sample_dir / "dry.yaml", text_config(sample_dir, rows, a.max_chunk_bytes)
            )
            m = self.measure_dry_run(n, cfg, sample_dir, run_id, True, "dry run (sample)")
            same = sha256_file(sample_dir / f"prompts.{run_id}.jsonl") == sha256_file(exact_export)
            self.check_sampled_estimate(n, m.stdout, tag, same)
            if not a.keep:
                _rm(sample_dir)
        if not a.keep:
            _rm(case_dir)

        if a.no_submit:
            return
        # 4, 5, 6: submit to the fake, merge, dict join.
        case_dir = size_dir / f"live-{tag}"
        case_dir.mkdir(parents=True, exist_ok=True)
        run_id = f"live{tag}"
        fake = Fake(case_dir / "fake.log")
        try:
            cfg = write_yaml(
                case_dir / "live.yaml",
                text_config(case_dir, rows, a.max_chunk_bytes, fake.openai_base_url),
            )
            m = measure(
                _mmirage("run", "--config", str(cfg), "--run-id", run_id, *self.beam_args),
                case_dir,
                env=self.env,
                label="submit",
            )
            self.record(n, "submit", m)
            watch = subprocess.run(
                _mmirage(
                    "check",
                    "--config",
                    str(cfg),
                    "--run-id",
                    run_id,
                    "--watch",
                    "--interval",
                    "1",
                    "--timeout",
                    "900",
                ),
                cwd=case_dir,
                env=self.env,
                capture_output=True,
                text=True,
            )
            if watch.returncode != 0:
                sys.exit(f"mmirage check --watch failed:\n{watch.stdout}\n{watch.stderr}")
            merged = case_dir / "merged.jsonl"
            m = measure(
                _mmirage(
                    "merge",
                    "--config",
                    str(cfg),
                    "--run-id",
                    run_id,
                    "--output-path",
                    str(merged),
                    *self.beam_args,
                ),
                case_dir,
                env=self.env,
                label="merge",
            )
            self.record(n, "merge", m)
            joined = case_dir / "joined.jsonl"
            spec = json.loads(self.loop_spec(n, rows, case_dir / "join", "join").read_text())
            spec.update(
                base_url=fake.openai_base_url,
                receipts=str(case_dir / "meta" / f"batch_metadata.text.{run_id}.jsonl"),
                output_path=str(joined),
                errors_path=str(case_dir / "joined.errors.jsonl"),
            )
            spec_path = case_dir / "join" / "spec.json"
            spec_path.write_text(json.dumps(spec), encoding="utf-8")
            m = measure(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--case",
                    "dictjoin",
                    str(spec_path),
                ],
                case_dir,
                label="dict join",
            )
            self.record(n, "dict join", m)
            merged_rows = count_lines(merged)
            same = sha256_file(merged) == sha256_file(joined)
            self.check(
                n,
                f"{tag}: merged rows {merged_rows:,} of {n:,}; "
                f"merged file {'byte-identical to' if same else 'DIFFERS from'} the dict join's",
            )
            info.setdefault("merged_ok", []).append(merged_rows == n and same)
        finally:
            fake.stop()
            if not a.keep:
                _rm(case_dir)

    def check(self, n: int, text: str) -> None:
        """Record a cross-check for the report, and log it at once."""
        self.info[n]["checks"].append(text)
        self.log(f"{n:>9,} rows  check: {text}")

    def has_sample_estimate(self) -> bool:
        """Whether the mmirage under test has ``run --estimate sample``."""
        if not hasattr(self, "_has_sample"):
            out = subprocess.run(
                [*_mmirage("run"), "--help"], env=self.env, capture_output=True, text=True
            )
            self._has_sample = "--estimate" in out.stdout
            if not self._has_sample:
                self.log("this mmirage has no --estimate sample: that case is skipped")
        return self._has_sample

    def check_exact_estimate(self, n: int, stdout: str, tag: str) -> None:
        """The dry run's exact input tokens equal the floor's count."""
        m = _EXACT_ESTIMATE.search(stdout)
        floor = self.info[n].get("floor_tokens")
        shown = int(m.group(1).replace(",", "")) if m else None
        ok = shown is not None and shown == floor
        self.check(
            n,
            f"{tag}: dry run's exact estimate {shown if shown is None else f'{shown:,}'} input "
            f"tokens {'equals' if ok else 'DIFFERS from'} the floor's count {floor:,}",
        )
        self.info[n].setdefault("estimate_ok", []).append(ok)

    def check_sampled_estimate(self, n: int, stdout: str, tag: str, same_export: bool) -> None:
        """The sampled estimate is within its stated bound of the floor's exact count,
        and the export is byte-identical to the exact dry run's."""
        m = _SAMPLED_ESTIMATE.search(stdout)
        floor = self.info[n].get("floor_tokens") or 0
        if m is None:
            self.check(n, f"{tag}: dry run (sample): NO sampled estimate line")
            self.info[n].setdefault("estimate_ok", []).append(False)
            return
        est, sampled, bound = (int(m.group(g).replace(",", "")) for g in ("est", "k", "bound"))
        within = abs(est - floor) <= bound
        self.check(
            n,
            f"{tag}: dry run (sample): ~{est:,} input tokens from {sampled:,} sampled requests, "
            f"±{bound:,}; the exact count {floor:,} is {'within' if within else 'OUTSIDE'} the "
            f"bound (error {est - floor:+,}, {100 * (est - floor) / max(floor, 1):+.2f}%); export "
            f"{'byte-identical to' if same_export else 'DIFFERS from'} the exact dry run's",
        )
        self.info[n].setdefault("estimate_ok", []).append(within and same_export)

    def check_dry_run(self, n: int, digests: dict, tag: str) -> None:
        info = self.info[n]
        dry, full = digests["dry"], digests["full"]
        rec = dry["receipts"] or {}
        info["dry_chunks"] = rec.get("chunks", 0)
        info["dry_max_chunk_bytes"] = rec.get("max_chunk_total_bytes", 0)
        info["dry_max_chunk_requests"] = rec.get("max_chunk_requests", 0)
        ok_export = dry["export"] == full["export"]
        ok_place = dry["placeholders"] == full["placeholders"]
        self.check(
            n,
            f"{tag}: dry run: {dry['export'][0]:,} request lines "
            f"{'identical to' if ok_export else 'DIFFER from'} the full loop's (as a multiset); "
            f"{dry['placeholders'][0]:,} placeholder rows "
            f"{'identical' if ok_place else 'DIFFER'}; invalid rows {dry['invalid_rows']}",
        )
        info.setdefault("dry_ok", []).append(ok_export and ok_place and dry["export"][0] == n)

    def run_images(self) -> None:
        a = self.args
        img_dir = self.work / "images"
        self.log(f"making {len(PHOTOS)} photographs of {a.image_side} px (long side)")
        photos = make_photos(img_dir / "photos", a.image_side)
        rows = img_dir / "rows.jsonl"
        make_image_rows(a.images, photos, rows)
        case_dir = img_dir / "dry"
        cfg = write_yaml(
            case_dir / "images.yaml",
            image_config(case_dir, rows, img_dir / "photos", a.image_max_chunk_bytes),
        )
        m = measure(
            _mmirage(
                "run",
                "--config",
                str(cfg),
                "--export-prompts",
                str(case_dir / "prompts.jsonl"),
                "--run-id",
                "images",
                *self.beam_args,
            ),
            case_dir,
            env=self.env,
            label="images dry run",
        )
        self.record(a.images, "images dry run", m)
        rec = receipts_summary(case_dir / "meta" / "batch_metadata.dry-run.multimodal.images.jsonl")
        self.image = {
            "rows": a.images,
            "photos": len(photos),
            "photo_bytes": sum(p.stat().st_size for p in photos) / len(photos),
            "side": a.image_side,
            "m": m,
            **rec,
        }
        if not a.keep:
            _rm(case_dir)

    def failed_checks(self) -> list[str]:
        """The sizes whose outputs disagree with the loops', or whose chunks exceed the
        greedy minimum plus the chunking shards."""
        shards = _chunking_shards(self.beam_args)
        failed = []
        for n, info in self.info.items():
            if not all(info.get("dry_ok", [True])):
                failed.append(f"{n:,} rows: the dry run's outputs differ from the full loop's")
            if not all(info.get("estimate_ok", [True])):
                failed.append(f"{n:,} rows: a dry run's estimate disagrees with the floor's count")
            if not all(info.get("two_ok", [True])):
                failed.append(f"{n:,} rows: the two-output dry run disagrees with its loops")
            if not all(info.get("merged_ok", [True])):
                failed.append(f"{n:,} rows: merge's output differs from the dict join's")
            if info.get("dry_chunks", 0) > info.get("greedy_chunks", 0) + shards:
                failed.append(f"{n:,} rows: more chunks than the greedy minimum + shards")
        return failed

    # ----------------------------------------------------------------------- report

    def med(self, n: int, case: str, attr: str) -> Optional[float]:
        ms = self.results.get((n, case))
        return statistics.median(getattr(m, attr) for m in ms) if ms else None

    def report(self, sizes: list[int], started: str, complete: bool = True) -> str:
        """The Markdown report of what has run so far (``complete``: everything)."""
        a = self.args
        beam_version = _beam_version()
        two = [n for n in sizes if (n, SHIPPED_CASES[2]) in self.results]
        sizes = [n for n in sizes if (n, "dry run") in self.results]
        lines = [
            "## mmirage-beam scale benchmark" + ("" if complete else " (in progress)"),
            "",
            f"- date: {started} (UTC); `python benchmarks/bench_scale.py {a._command}`",
            f"- machine: {os.cpu_count()} CPUs (nproc), {_total_ram_gib():.1f} GiB RAM, "
            f"load average at start {a._load_at_start}, {platform.machine()}",
            f"- Python {platform.python_version()}, Apache Beam {beam_version}, "
            f"mmirage-beam {_git_rev()}; runner: DirectRunner"
            + (f" {' '.join(self.beam_args)}" if self.beam_args else " (in-memory default)"),
            f"- text rows: GSM8K cycled, distinct ids; one OpenAI output per row; "
            f"max_requests_per_chunk {MAX_REQUESTS_PER_CHUNK:,}, max_chunk_bytes "
            f"{a.max_chunk_bytes:,}",
            f"- each figure: the median of {a.repeat} interleaved run(s); CPU = user + sys of "
            f"the process tree; peak RSS = the largest sum of RSS over the process tree, "
            f"sampled every {int(POLL_SECS * 1000)} ms",
            "",
            "| rows | case | wall s | CPU s | peak RSS MiB | rows/s |",
            "|---:|---|---:|---:|---:|---:|",
        ]
        for n in sorted(set(sizes) | set(two)):
            for case in CASES + SHIPPED_CASES:
                if (n, case) not in self.results:
                    continue
                wall = self.med(n, case, "wall")
                cpu = self.med(n, case, "cpu")
                rss = self.med(n, case, "peak_rss") / MiB
                spread = ""
                if a.repeat > 1:
                    walls = [m.wall for m in self.results[(n, case)]]
                    spread = f" ({min(walls):.1f}-{max(walls):.1f})"
                lines.append(
                    f"| {n:,} | {case} | {wall:.2f}{spread} | {cpu:.2f} | {rss:.1f} | "
                    f"{n / wall:,.0f} |"
                )
        lines += (
            []
            if not sizes
            else [
                "",
                "| rows | dry run / minimal loop | dry run / floor tokens | dry run / full loop "
                "| dry run (sample) / minimal loop | submit / dry run (wall) "
                "| merge / dict join | dry-run peak RSS | merge peak RSS |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            ]
        )
        for n in sizes:
            dry = self.med(n, "dry run", "wall")
            sub = self.med(n, "submit", "wall")
            merge = self.med(n, "merge", "wall")
            join = self.med(n, "dict join", "wall")
            mrss = self.med(n, "merge", "peak_rss")
            minimal = self.med(n, "minimal loop", "wall")
            lines.append(
                f"| {n:,} | {_ratio(dry, minimal)} | "
                f"{_ratio(dry, self.med(n, 'floor tokens', 'wall'))} | "
                f"{_ratio(dry, self.med(n, 'full loop', 'wall'))} | "
                f"{_ratio(self.med(n, 'dry run (sample)', 'wall'), minimal)} | "
                + (f"{sub / dry:.2f}x ({(sub / dry - 1) * 100:+.0f}%)" if sub else "-")
                + f" | {_ratio(merge, join)} | {self.med(n, 'dry run', 'peak_rss') / MiB:.0f} MiB"
                f" | {f'{mrss / MiB:.0f} MiB' if mrss else '-'} |"
            )
        lines += (
            []
            if not sizes
            else [
                "",
                "| rows | CPU: dry run / minimal loop | dry run / floor tokens "
                "| dry run / full loop | dry run (sample) / minimal loop | submit / dry run "
                "| merge / dict join |",
                "|---:|---:|---:|---:|---:|---:|---:|",
            ]
        )
        for n in sizes:
            cpu = {case: self.med(n, case, "cpu") for case in CASES}  # None: not run
            lines.append(
                f"| {n:,} | {_ratio(cpu['dry run'], cpu['minimal loop'])} | "
                f"{_ratio(cpu['dry run'], cpu['floor tokens'])} | "
                f"{_ratio(cpu['dry run'], cpu['full loop'])} | "
                f"{_ratio(cpu['dry run (sample)'], cpu['minimal loop'])} | "
                f"{_ratio(cpu['submit'], cpu['dry run'])} | "
                f"{_ratio(cpu['merge'], cpu['dict join'])} |"
            )
        if two:
            lines += [
                "",
                f"The shipped two-output config (`{SHIPPED_GSM8K.relative_to(REPO)}`: "
                "`solution` plain, `grading` JSON with an `output_schema`, 500 requests per "
                "chunk) against loops doing the same two outputs:",
                "",
                "| rows | requests | CPU: dry run / minimal loop | dry run / floor tokens "
                "| dry run (sample) / minimal loop | dry-run peak RSS |",
                "|---:|---:|---:|---:|---:|---:|",
            ]
            for n in two:
                cpu = {case: self.med(n, case, "cpu") for case in SHIPPED_CASES}
                mini, toks, dry, samp = (cpu[c] for c in SHIPPED_CASES)
                lines.append(
                    f"| {n:,} | {self.info[n].get('two_requests', 0):,} | "
                    f"{_ratio(dry, mini)} | {_ratio(dry, toks)} | {_ratio(samp, mini)} | "
                    f"{self.med(n, SHIPPED_CASES[2], 'peak_rss') / MiB:.0f} MiB |"
                )
        if len(sizes) > 1:
            lo, hi = min(sizes), max(sizes)
            parts = []
            for case in ("dry run", "merge"):
                big, small = self.med(hi, case, "peak_rss"), self.med(lo, case, "peak_rss")
                if big and small:
                    parts.append(f"{case} {big / small:.2f}x")
            lines += ["", f"Peak RSS {hi:,} rows / {lo:,} rows: " + ", ".join(parts) + "."]
        lines += (
            []
            if not sizes
            else [
                "",
                "| rows | request bytes | dry-run chunks | greedy minimum (loop) | chunking shards "
                "| chunks <= greedy + shards | largest chunk |",
                "|---:|---:|---:|---:|---:|---|---:|",
            ]
        )
        shards = _chunking_shards(self.beam_args)
        for n in sizes:
            info = self.info[n]
            ok = info["dry_chunks"] <= info["greedy_chunks"] + shards
            lines.append(
                f"| {n:,} | {info['request_bytes'] / MiB:,.1f} MiB | {info['dry_chunks']} | "
                f"{info['greedy_chunks']} | {shards} | {'yes' if ok else '**NO**'} | "
                f"{info['dry_max_chunk_requests']:,} requests, "
                f"{info['dry_max_chunk_bytes'] / MiB:.1f} MiB |"
            )
        if self.image:
            im = self.image
            m = im["m"]
            mcb = a.image_max_chunk_bytes
            lines += [
                "",
                f"Multimodal dry run: {im['rows']:,} rows cycling over {im['photos']} real "
                f"photographs upscaled to {im['side']} px (long side), JPEG, "
                f"{im['photo_bytes'] / MiB:.1f} MiB each on average.",
                "",
                "| rows | request bytes | chunks | max_chunk_bytes | largest chunk | wall s | "
                "CPU s | peak RSS MiB | peak RSS / max_chunk_bytes | peak RSS / request bytes |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
                f"| {im['rows']:,} | {im['request_bytes'] / MiB:,.1f} MiB | {im['chunks']} | "
                f"{mcb / MiB:.1f} MiB | {im['max_chunk_total_bytes'] / MiB:.1f} MiB | "
                f"{m.wall:.2f} | {m.cpu:.2f} | {m.peak_rss / MiB:.1f} | "
                f"{m.peak_rss / mcb:.2f} | {m.peak_rss / max(1, im['request_bytes']):.2f} |",
            ]
        lines += ["", "Checks:"]
        for n in sorted(set(sizes) | set(two)):
            lines += [f"- {n:,} rows: {c}" for c in self.info[n]["checks"]]
        return "\n".join(lines) + "\n"


_EXACT_ESTIMATE = re.compile(rf"  {OUTPUT}: [\d,]+ request\(s\), input tokens ([\d,]+) \(exact\)")
# The shipped config's two outputs: the total line (its grading output is an estimate:
# OpenAI does not document the tokens of a JSON schema; the floor counts the same way).
_TOTAL_ESTIMATE = re.compile(r"  total: [\d,]+ request\(s\), input tokens ([\d,]+) \(")
_SAMPLED_ESTIMATE = re.compile(
    rf"  {OUTPUT}: [\d,]+ request\(s\), input tokens ~(?P<est>[\d,]+) \(sampled "
    r"(?P<k>[\d,]+) of [\d,]+ requests, ±[\d.]+% \(±(?P<bound>[\d,]+)\)"
)


def _ratio(a: Optional[float], b: Optional[float]) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def _chunking_shards(beam_args: list[str]) -> int:
    from apache_beam.options.pipeline_options import PipelineOptions

    from mmirage_beam.transforms.submit_rows import default_chunking_parallelism

    return default_chunking_parallelism(PipelineOptions(beam_args))


def _beam_version() -> str:
    try:
        from importlib.metadata import version

        return version("apache-beam")
    except Exception:
        return "?"


def _total_ram_gib() -> float:
    import psutil

    return psutil.virtual_memory().total / (1024**3)


def _git_rev() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        )
        return out.stdout.strip() or "?"
    except OSError:
        return "?"


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s.replace("_", "")) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--rows takes integers like 200000,1000000: {text!r}"
        ) from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("--rows needs at least one positive size")
    return sizes


def _on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--case"]:
        return case_main(argv[1], argv[2])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=_sizes, default=[200_000, 1_000_000], help="sizes, e.g. 2000")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved runs of every case")
    ap.add_argument("--images", type=int, default=400, help="rows of the image case (0: skip)")
    ap.add_argument("--image-side", type=int, default=4032, help="photo long side, in pixels")
    ap.add_argument("--max-chunk-bytes", type=int, default=DEFAULT_MAX_CHUNK_BYTES)
    ap.add_argument(
        "--image-max-chunk-bytes",
        type=int,
        default=DEFAULT_MAX_CHUNK_BYTES,
        help="max_chunk_bytes of the image case, in bytes (default 50 MiB)",
    )
    ap.add_argument("--no-submit", action="store_true", help="skip submit, merge and dict join")
    ap.add_argument(
        "--shipped",
        choices=("no", "also", "only"),
        default="no",
        help="also (or only) the shipped two-output GSM8K config's dry runs against loops "
        "doing the same two outputs",
    )
    ap.add_argument("--workdir", help="work folder (default: a temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder and every output")
    args, beam_args = ap.parse_known_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    args._command = " ".join(shlex.quote(x) for x in argv)
    args._load_at_start = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    made = args.workdir is None
    work = Path(args.workdir or tempfile.mkdtemp(prefix="mmirage-bench-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    started = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    bench = Bench(args, beam_args, work)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        for n in args.rows:
            for rep in range(args.repeat):
                bench.run_size(n, rep)
                partial = bench.report(args.rows, started, complete=False)
                (work / "bench.md").write_text(partial, encoding="utf-8")
        if args.images:
            bench.run_images()
        text = bench.report(args.rows, started)
        (work / "bench.md").write_text(text, encoding="utf-8")
        print()
        print(text)
        if not (made and not args.keep):
            print(f"report: {work / 'bench.md'}")
        failed = bench.failed_checks()
        if failed:
            print("CHECKS FAILED: " + "; ".join(failed), file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        print("\ninterrupted: stopping what the benchmark started", file=sys.stderr)
        return 130
    finally:
        for proc in list(_LIVE):
            _stop(proc)
        signal.signal(signal.SIGTERM, previous)
        if made and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
