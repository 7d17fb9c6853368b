"""``mmirage ui`` in a real browser: Debian's chromium (``/usr/bin/chromium``) driven by
Playwright, against a dashboard served in this process over runs made by the real
``mmirage run`` / ``merge`` against a fake provider whose clock the tests move.

One browser, one fake and one dashboard per module. The runs (first 20 GSM8K rows, two
batches of 10): ``merged1`` submitted and merged (rows 3 and 7 carry
``FAKE_ERROR:server_error``, row 11 ``FAKE_ERROR:invalid_request``, row 3 some HTML
markup); later tests add runs
whose batches take 600 s of the fake's clock.

Skipped when /usr/bin/chromium is missing, unless ``MMIRAGE_REQUIRE_BROWSER=1`` (CI),
which makes it a failure.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from tests.conftest import GSM8K_JSONL, base_config, write_config

CHROMIUM = "/usr/bin/chromium"
if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
    if os.environ.get("MMIRAGE_REQUIRE_BROWSER") == "1":
        pytest.fail(
            f"MMIRAGE_REQUIRE_BROWSER=1 but {CHROMIUM} is missing: apt-get install -y chromium",
            pytrace=False,
        )
    pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)", allow_module_level=True)

from playwright.sync_api import expect, sync_playwright  # noqa: E402

from mmirage_beam.config import load_config  # noqa: E402
from mmirage_beam.testing import FakeProviderServer  # noqa: E402
from mmirage_beam.ui.data import Source, run_view  # noqa: E402
from mmirage_beam.ui.server import Dashboard, DashboardServer  # noqa: E402
from pipelines.merge import main as merge_main  # noqa: E402
from pipelines.runs import main as runs_main  # noqa: E402
from pipelines.submit import main as run_main  # noqa: E402

KEY = "sk-test-openai"
FAILING = {3: "server_error", 7: "server_error", 11: "invalid_request"}
#: in row 3's question, so in its prompt: the page must show it as text
MARKUP = "<b id='injected'>bold?</b>"
#: generous: the page refreshes every 0.2 s; a lookup of a few batches takes ~50 ms
WAIT_MS = 20_000
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class World:
    """The module's fake (with a movable clock), config, dashboard and browser page."""

    def __init__(self, tmp: Path) -> None:
        self.offset = 0.0
        self.fake = FakeProviderServer(clock=lambda: time.time() + self.offset).start()
        lines = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:20]
        rows = [json.loads(x) for x in lines]
        for i, marker in FAILING.items():
            rows[i]["question"] += f" FAKE_ERROR:{marker}"
        rows[3]["question"] += f" {MARKUP}"  # shown as text, never as HTML
        self.questions = [r["question"] for r in rows]
        data = tmp / "rows.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        cfg = base_config(tmp, "openai", base_url=self.fake.openai_base_url)
        cfg["processors"][0]["max_requests_per_chunk"] = 10
        cfg["loading_params"]["datasets"][0]["path"] = str(data)
        self.config = write_config(tmp, cfg)
        self.tmp = tmp


def _ok(code: int, capsys) -> str:
    out, err = capsys.readouterr()
    assert code == 0 or code == 1, out + err  # 1: merged with failed rows
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = World(tmp_path_factory.mktemp("ui"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", KEY)
        assert run_main(["--config", w.config, "--run-id", "merged1"]) == 0
        out = str(w.tmp / "merged1.jsonl")
        code = merge_main(["--config", w.config, "--run-id", "merged1", "--output-path", out])
        assert code == 1  # three rows failed
    app = Dashboard([Source(0, w.config, load_config(w.config))], "t0ken-" + "x" * 20)
    app.refresh_secs = 0.2
    with DashboardServer(app) as server:
        w.server, w.app = server, app
        with sync_playwright() as pw:
            # launch() gives the browser a fresh temporary user-data-dir of its own
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            w.browser = browser
            yield w
            browser.close()
    w.fake.stop()


@pytest.fixture
def page(world, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # the dashboard's lookups run in this process
    context = world.browser.new_context()
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    yield page
    context.close()


def _cli_lines(capsys, config: str) -> list[list[str]]:
    """``mmirage runs``' table: one list of cells per run (columns are 2+ spaces apart)."""
    capsys.readouterr()
    assert runs_main(["--config", config]) == 0
    out, _err = capsys.readouterr()
    lines = out.splitlines()[1:-1]  # the header and the total line
    return [re.split(r"\s{2,}", line.strip()) for line in lines]


def test_runs_table_matches_mmirage_runs(world, page, capsys):
    page.goto(world.server.url + "/#/runs")
    table = page.locator("#runs-table")
    expect(table).to_be_visible()
    cli = _cli_lines(capsys, world.config)
    assert cli and cli[0][0] in {"merged1", "live1", "cancel1"}
    shown = []
    for row in table.locator("tbody tr").all():
        cells = row.locator("td[data-col]").all_inner_texts()
        shown.append([c.strip() for c in cells])
    assert shown == cli
    merged = page.locator("tr[data-run=merged1]")
    expect(merged.locator("td[data-col=state]")).to_have_text("merged")
    expect(merged.locator("td[data-col=failures]")).to_have_text("3")
    # merged whole after its batches ended: listed from its records, not looked up again
    expect(merged).to_contain_text("ended (merged) 2")


def test_spend_totals_match_the_ledger_of_mmirage_runs(world, page, capsys):
    page.goto(world.server.url + "/#/spend")
    expect(page.locator("#by-day rect")).not_to_have_count(0)
    capsys.readouterr()
    assert runs_main(["--config", world.config, "--no-lookup"]) == 0
    total = capsys.readouterr()[0].splitlines()[-1]
    spent = re.search(r"actual cost of the merged runs (\S+);", total).group(1)
    assert spent.startswith("$")
    expect(page.locator("#total-actual")).to_have_text(spent)
    expect(page.locator("#by-provider rect[data-key=actual_usd]")).to_have_count(1)
    expect(page.locator("#ledger")).to_contain_text("merged1")


def test_drill_down_shows_the_failed_rows_with_their_markers(world, page):
    page.goto(world.server.url + "/#/run/0/merged1")
    types = page.locator("#failure-types tr[data-type]")
    expect(types).to_have_count(2)
    by_type = dict(
        types.evaluate_all("rs => rs.map(r => [r.dataset.type, r.cells[1].textContent])")
    )
    # error types as merge names them: the fake's 500 and 400 errors
    assert by_type == {"server_error": "2", "invalid_request_error": "1"}, by_type
    for kind, marker in (
        ("server_error", "server_error"),
        ("invalid_request_error", "invalid_request"),
    ):
        row = page.locator(f"#failure-types tr[data-type='{kind}']")
        row.get_by_role("button", name="show rows").click()
        rows = page.locator("#failed-rows tr[data-source-index]")
        want = [i for i, m in FAILING.items() if m == marker]
        expect(rows).to_have_count(len(want))
        indexes = [int(x) for x in rows.evaluate_all("rs => rs.map(r => r.dataset.sourceIndex)")]
        assert indexes == want
        for i, r in zip(want, rows.all()):
            expect(r.locator("pre.row")).to_contain_text(f"FAKE_ERROR:{marker}")
            assert r.locator("td.message").inner_text().strip()
            # the prompt that was sent (base_config's template), marker included
            prompt = r.locator("pre.prompt")
            expect(prompt).to_have_text(f"Answer concisely:\n{world.questions[i]}")
            expect(prompt).to_contain_text(f"FAKE_ERROR:{marker}")
            r.locator("details.prompt summary").click()
            expect(prompt).to_be_visible()
        expect(page.locator("#injected")).to_have_count(0)  # row 3's markup stayed text


def _submit_slow(world, run_id: str) -> None:
    world.fake.script(processing_delay_secs=600)
    try:
        assert run_main(["--config", world.config, "--run-id", run_id, "--no-reuse"]) == 0
    finally:
        world.fake.script(processing_delay_secs=None)


def test_live_view_follows_the_batches_without_reloading(world, page):
    _submit_slow(world, "live1")
    page.goto(world.server.url + "/#/run/0/live1")
    statuses = page.locator("#batches .batch-status")
    expect(statuses).to_have_count(2)
    expect(statuses).to_have_text(["in_progress", "in_progress"])
    expect(page.locator("#refreshed")).to_contain_text("in flight")
    page.evaluate("window.__sameDocument = true")
    world.offset += 700  # the fake's batches end (completed 600 s after creation)
    expect(statuses).to_have_text(["completed", "completed"])
    expect(page.locator("#refreshed")).to_contain_text("every batch has ended")
    # the progress the provider reports: rows 3, 7 (chunk 1) and 11 (chunk 2) fail
    progress = page.locator("#batches tr[data-batch] td:nth-child(8)")
    expect(progress).to_have_text(["8 done, 2 failed of 10", "9 done, 1 failed of 10"])
    assert page.evaluate("window.__sameDocument") is True  # updated in place


def test_a_missing_key_lists_the_runs_unlooked_with_a_notice(world, page, monkeypatch):
    """Opened without the provider's key (the demo's configs, later), the runs page
    still lists every run, its batches "not looked up", and says which key to set; it
    showed only the key error before (newcomer trial). After the live view's test: a
    run merged whole is listed from its records and needs no key, ``live1`` needs one."""
    monkeypatch.delenv("OPENAI_API_KEY")
    page.goto(world.server.url + "/#/runs")
    expect(page.locator("#runs-table")).to_be_visible()
    expect(page.locator("p.notice")).to_contain_text("OPENAI_API_KEY")
    expect(page.locator("p.notice")).to_contain_text("--no-lookup")
    merged = page.locator("tr[data-run=merged1]")
    expect(merged.locator("td[data-col=state]")).to_have_text("merged")
    expect(merged).to_contain_text("ended (merged) 2")
    expect(page.locator("tr[data-run=live1]")).to_contain_text("not looked up 2")


def test_cancel_needs_the_token(world, page):
    _submit_slow(world, "cancel1")
    mine = {
        b["provider_batch_id"] for b in run_view(world.app.sources[0], "cancel1", False)["batches"]
    }
    assert len(mine) == 2
    page.goto(world.server.url + "/#/run/0/cancel1")
    expect(page.locator("#batches .batch-status")).to_have_text(["in_progress", "in_progress"])
    page.locator("#cancel").click()
    expect(page.locator("#action-result")).to_contain_text("401")
    assert _statuses(world, mine) <= {"validating", "in_progress"}  # nothing cancelled
    page.fill("#token", "not-the-token")
    page.locator("#token").dispatch_event("change")
    page.evaluate("document.getElementById('action-result').textContent = ''")
    page.locator("#cancel").click()
    expect(page.locator("#action-result")).to_contain_text("401")
    assert _statuses(world, mine) <= {"validating", "in_progress"}
    page.fill("#token", world.app.token)
    page.locator("#token").dispatch_event("change")
    page.locator("#cancel").click()
    expect(page.locator("#action-result")).to_contain_text("asked for 2 batch(es), 0 refused")
    assert _statuses(world, mine) == {"cancelling"}


def _statuses(world, ids: set[str]) -> set[str]:
    return {b["status"] for b in world.fake.batches("openai") if b["id"] in ids}


def _raw(world, method: str, path: str, headers: dict[str, str]) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", world.server.port, timeout=30)
    try:
        conn.request(method, path, body=b"{}" if method == "POST" else None, headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def test_other_origins_are_refused(world, page):
    port = world.server.port
    own = {"Host": f"127.0.0.1:{port}"}
    assert _raw(world, "GET", "/api/runs", own)[0] == 200
    # another site's page (Origin), a rebound DNS name (Host), even with the token
    evil = {"Origin": "http://evil.example", "Host": f"127.0.0.1:{port}"}
    status, body = _raw(world, "GET", "/api/runs", evil)
    assert status == 403 and "Origin" in body["error"]
    status, body = _raw(world, "GET", "/api/runs", {"Host": f"rebind.example:{port}"})
    assert status == 403 and "Host" in body["error"]
    token = {"X-Mmirage-Token": world.app.token}
    status, _ = _raw(world, "POST", "/api/runs/0/merged1/cancel", evil | token)
    assert status == 403
    # In the browser: a page of another origin (the fake provider's port) posts to it.
    page.goto(world.fake.openai_base_url.rsplit("/v1", 1)[0] + "/_fake/state")
    outcome = page.evaluate(
        """async ([url, token]) => {
            try {
                const r = await fetch(url, {method: "POST", headers: {"X-Mmirage-Token": token}});
                return "answered " + r.status;
            } catch (e) { return "blocked"; }
        }""",
        [f"{world.server.url}/api/runs/0/merged1/cancel", world.app.token],
    )
    assert outcome == "blocked"
    seen = page.evaluate(
        """async (url) => {
            await fetch(url, {method: "POST", mode: "no-cors", body: "x"});
            return "sent";
        }""",
        f"{world.server.url}/api/runs/0/merged1/cancel",
    )
    assert seen == "sent"
    refused = [r for r in world.app.refused if r[1] == "/api/runs/0/merged1/cancel"]
    assert refused and all("Origin" in r[2] for r in refused)


def test_resubmit_from_the_page_sends_the_retryable_rows_as_a_linked_run(world, page):
    """Last: it adds a run linked to merged1. The two server_error rows are retryable,
    the invalid_request row is not."""
    before = len(world.fake.submitted_requests("openai"))
    page.goto(world.server.url + f"/#token={world.app.token}")
    expect(page.locator("#runs-table")).to_be_visible()
    assert page.input_value("#token") == world.app.token  # taken from the launch link
    page.goto(world.server.url + "/#/run/0/merged1")
    page.locator("#resubmit").click()
    result = page.locator("#action-result")
    expect(result).to_contain_text("resubmit: exit 0, new run ", timeout=120_000)
    new_run = result.inner_text().rsplit(" ", 1)[-1]
    sent = world.fake.submitted_requests("openai")[before:]
    assert len(sent) == 2  # rows 3 and 7
    page.goto(world.server.url + "/#/runs")
    links = page.locator("tr[data-run=merged1] td[data-col=links]")
    expect(links).to_have_text(new_run)
