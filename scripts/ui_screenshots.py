"""Make the dashboard's screenshots (docs/ui-runs.png, docs/ui-run.png, docs/ui-spend.png).

    python scripts/ui_screenshots.py [--workdir DIR] [--out docs]

Runs, against the embedded fake provider, what ``mmirage demo`` runs (its config and the
bundled GSM8K sample, 40 rows) for OpenAI and for Anthropic, with three rows of the OpenAI
sample marked ``FAKE_ERROR:server_error`` / ``invalid_request`` so the run page has
failures to drill into, plus one OpenAI run left in flight; then serves ``mmirage ui``
over both configs in this process and photographs its three pages in Debian's chromium
(``/usr/bin/chromium``) through Playwright.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Optional, Sequence

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
MARKED = {3: "server_error", 7: "server_error", 11: "invalid_request"}


def _config(fake, provider: str, work: Path, marked: dict[int, str]) -> str:
    from pipelines.demo import CONFIG, SAMPLE

    work.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(x) for x in SAMPLE.read_text(encoding="utf-8").splitlines()[:40]]
    for i, marker in marked.items():
        rows[i]["question"] += f" FAKE_ERROR:{marker}"
    data = work / "gsm8k_sample.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    config = work / f"demo_{provider}.yaml"
    # the processor keys as `mmirage demo` writes them (pipelines/demo.py)
    processor = {"base_url": fake.base_url_for(provider), "max_requests_per_chunk": 10}
    text = CONFIG.format(
        provider=provider,
        processor="".join(f"    {k}: {json.dumps(v)}\n" for k, v in processor.items()),
        work=work,
        data=data,
    )
    config.write_text(text, encoding="utf-8")
    return str(config)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Make the runs and the three screenshots; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="/tmp/mmirage-ui-screenshots")
    ap.add_argument("--out", default=str(REPO / "docs"))
    args = ap.parse_args(argv)

    from playwright.sync_api import sync_playwright

    from mmirage_beam.config import load_config
    from mmirage_beam.testing import FakeProviderServer
    from mmirage_beam.ui.data import Source
    from mmirage_beam.ui.server import Dashboard, DashboardServer, new_token
    from pipelines.merge import main as merge_main
    from pipelines.submit import main as run_main

    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    with FakeProviderServer() as fake:
        for provider in ("OPENAI", "ANTHROPIC"):
            os.environ[f"{provider}_API_KEY"] = "sk-mmirage-demo-not-a-real-key"
        openai = _config(fake, "openai", work / "openai", MARKED)
        anthropic = _config(fake, "anthropic", work / "anthropic", {})
        for config, run_id in ((openai, "demo-openai"), (anthropic, "demo-anthropic")):
            assert run_main(["--config", config, "--run-id", run_id]) == 0
            out = str(Path(config).parent / "merged.jsonl")
            assert merge_main(["--config", config, "--run-id", run_id, "--output-path", out]) < 2
        fake.script(processing_delay_secs=3600)  # one run still in flight
        assert run_main(["--config", openai, "--run-id", "in-flight", "--no-reuse"]) == 0
        sources = [Source(i, p, load_config(p)) for i, p in enumerate((openai, anthropic))]
        with DashboardServer(Dashboard(sources, new_token())) as server:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path=CHROMIUM,
                    args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"],
                )
                page = browser.new_page(viewport={"width": 1400, "height": 700})
                page.goto(server.url + "/#/runs")
                page.wait_for_selector("#runs-table")
                page.screenshot(path=f"{args.out}/ui-runs.png", full_page=True)
                page.goto(server.url + "/#/run/0/demo-openai")
                page.get_by_role("button", name="show rows").first.click()
                page.locator("#failed-rows summary").first.click()
                page.screenshot(path=f"{args.out}/ui-run.png", full_page=True)
                page.goto(server.url + "/#/spend")
                page.wait_for_selector("#by-day")
                page.screenshot(path=f"{args.out}/ui-spend.png", full_page=True)
                browser.close()
    for name in ("ui-runs", "ui-run", "ui-spend"):
        print(f"wrote {args.out}/{name}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
