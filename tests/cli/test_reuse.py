"""Answers already paid for are reused, not bought again (mmirage_beam.reuse): a re-run
under the same metadata base sends only the requests no earlier run answered."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from mmirage_beam.progress.text import compact as _compact
from pipelines.merge import main as merge_main
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, REPO, base_config, write_config
from tests.runners import run_cli

ROWS = 6


def _read_jsonl(path):
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x]


def _config(tmp_path, fake, provider="openai"):
    data = tmp_path / "gsm8k.jsonl"
    lines = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:ROWS]
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = base_config(tmp_path, provider, base_url=fake.base_url_for(provider))
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    cfg["processing_params"]["output_schema"] = None
    return cfg


def _second_output(cfg):
    cfg["processing_params"]["outputs"].append(
        {
            "name": "hint",
            "type": "batch_api",
            "output_type": "plain",
            "prompt": "Give one hint:\n{{ question }}",
        }
    )
    return cfg


def _sent(fake, provider="openai"):
    return [e["custom_id"] for e in fake.submitted_requests(provider)]


def _merge(tmp_path, cfg_path, name="merged.jsonl"):
    out = tmp_path / name
    code = merge_main(["--config", cfg_path, "--output-path", str(out)])
    return code, _read_jsonl(out)


def _env(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return env


def test_added_output_sends_only_its_requests_openai_cli(tmp_path, provider_env):
    """The whole story through the ``mmirage`` command (subprocesses, real SDK, fake)."""
    fake = provider_env
    cfg = _config(tmp_path, fake)
    cfg["processors"][0]["max_tokens"] = 64
    cfg_path = write_config(tmp_path, cfg)
    env = _env(tmp_path)
    first = run_cli(["run", "--config", cfg_path], cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    merged = tmp_path / "first.jsonl"
    m1 = run_cli(
        ["merge", "--config", cfg_path, "--output-path", str(merged)], cwd=tmp_path, env=env
    )
    assert m1.returncode == 0, m1.stderr
    assert len(_sent(fake)) == ROWS

    write_config(tmp_path, _second_output(cfg))
    second = run_cli(["run", "--config", cfg_path], cwd=tmp_path, env=env)
    assert second.returncode == 0, second.stderr
    sent = _sent(fake)[ROWS:]
    assert sorted(sent) == sorted(f"hint-text-{i}" for i in range(ROWS))  # only the new output
    assert f"reuse:               {ROWS} request(s) answered by earlier runs" in second.stdout
    assert "saves up to $" in second.stdout

    out = tmp_path / "second.jsonl"
    env["MMIRAGE_PROGRESS_INTERVAL_SECS"] = "0.05"
    m2 = run_cli(["merge", "--config", cfg_path, "--output-path", str(out)], cwd=tmp_path, env=env)
    assert m2.returncode == 0, m2.stderr
    # the progress lines count the tokens this run paid for, as the summary does: the
    # reused answers' tokens are the earlier run's
    paid = re.search(r"^input tokens: +([\d,]+)$", m2.stdout, re.M)
    shown = re.findall(r"progress after .*tokens (\S+) in", m2.stderr)
    assert paid and shown, (m2.stdout, m2.stderr)
    assert shown[-1] == _compact(int(paid.group(1).replace(",", "")))
    rows = _read_jsonl(out)
    first_rows = _read_jsonl(merged)
    run1 = _run_of(first)
    assert len(rows) == ROWS
    for row, before in zip(rows, first_rows):
        assert row["answer"] == before["answer"]  # copied, not asked again
        assert row["hint"]
        assert row["mmirage_reused_from"] == {"answer": run1}
    print(first.stdout, first.stderr, m1.stdout, second.stdout, second.stderr, m2.stdout)


def _run_of(proc):
    for line in proc.stdout.splitlines():
        if line.startswith("run id:"):
            return line.split()[-1]
    raise AssertionError(proc.stdout)


@pytest.mark.parametrize("provider", ["anthropic"])
def test_added_output_reused_anthropic(tmp_path, provider_env, provider, capsys):
    fake = provider_env
    cfg = _config(tmp_path, fake, provider)
    cfg_path = write_config(tmp_path, cfg)
    assert submit_main(["--config", cfg_path]) == 0
    assert _merge(tmp_path, cfg_path, "first.jsonl")[0] == 0
    write_config(tmp_path, _second_output(cfg))
    assert submit_main(["--config", cfg_path]) == 0
    assert sorted(_sent(fake, provider)[ROWS:]) == sorted(f"hint-text-{i}" for i in range(ROWS))
    code, rows = _merge(tmp_path, cfg_path)
    assert code == 0
    assert all(r["answer"] and r["hint"] and r["mmirage_reused_from"]["answer"] for r in rows)

    # staleness as the launcher asks it (one call per earlier batch): results expired
    from mmirage_beam.config import load_config
    from mmirage_beam.providers.base import BatchAdapterRegistry
    from mmirage_beam.reuse import check_staleness, earlier_answer_files

    config = load_config(cfg_path)
    files = earlier_answer_files(str(tmp_path / "meta" / "batch_metadata"))
    adapter_cls = BatchAdapterRegistry.get(provider)
    assert check_staleness(files, adapter_cls, config.processor, True).stale == {}
    first = fake.batches(provider)[0]["id"]
    fake.expire_results(first)
    stale = check_staleness(files, adapter_cls, config.processor, True).stale
    assert list(stale) == [first] and "404" in stale[first]


def test_changed_requests_no_reuse_stale_and_dry_run(tmp_path, provider_env, capsys, monkeypatch):
    """Only an exact body is reused: a new parameter sends again; a new run of the same
    config sends nothing; ``--no-reuse`` sends everything; the dry run reports what reuse
    saves; an answer whose results file expired at the provider is sent again, and the
    run says so."""
    fake = provider_env
    cfg = _config(tmp_path, fake)
    cfg_path = write_config(tmp_path, cfg)
    assert submit_main(["--config", cfg_path]) == 0
    assert _merge(tmp_path, cfg_path, "first.jsonl")[0] == 0
    capsys.readouterr()
    sent = len(_sent(fake))
    assert sent == ROWS

    # dry run without the key: savings reported, staleness said not checked
    monkeypatch.delenv("OPENAI_API_KEY")
    write_config(tmp_path, _second_output(json.loads(json.dumps(cfg))))
    assert submit_main(["--config", cfg_path, "--export-prompts", str(tmp_path / "x.jsonl")]) == 0
    out = capsys.readouterr()
    assert f"{ROWS} request(s) answered by earlier runs, would not be sent" in out.out
    assert "staleness not checked" in out.err
    exported = _read_jsonl(next(tmp_path.glob("x.*.jsonl")))
    hints = [f"hint-text-{i}" for i in range(ROWS)]
    assert sorted(r["request"]["custom_id"] for r in exported) == hints
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-openai")

    def resend(change, *flags):
        nonlocal sent
        changed = json.loads(json.dumps(cfg))
        change(changed)
        write_config(tmp_path, changed)
        assert submit_main(["--config", cfg_path, *flags]) == 0
        now = _sent(fake)[sent:]
        sent += len(now)
        return sorted(now)

    every = sorted(f"answer-text-{i}" for i in range(ROWS))
    assert resend(lambda c: c["processors"][0].update(temperature=0.5)) == every
    # the first config again, as a new run: everything reused, nothing sent ...
    assert resend(lambda c: None, "--new-run") == []
    assert "batches submitted:   0" in capsys.readouterr().out
    # ... unless --no-reuse
    assert resend(lambda c: None, "--new-run", "--no-reuse") == every
    # stale: the first run's results expired at the provider
    first_batch = fake.batches("openai")[0]["id"]
    fake.expire_results(first_batch)
    capsys.readouterr()
    assert resend(lambda c: None, "--new-run") == every
    out = capsys.readouterr()
    assert f"batch {first_batch}: results no longer available" in out.err
    assert f"{ROWS} request(s) sent again: their earlier answer's results expired" in out.out


def test_answer_key_holds_what_changes_the_answer():
    """The key drops only the custom_id (wherever the provider puts it) and keeps the
    provider's settings, model, parameters, prompt and images."""
    from mmirage_beam.providers.base import BatchAdapterRegistry
    from mmirage_beam.providers.config import BatchProviderConfigRegistry
    from mmirage_beam.reuse import answer_key, key_settings

    def key(provider, cid, payload, **settings):
        config = BatchProviderConfigRegistry.get(provider)(provider=provider, **settings)
        adapter = BatchAdapterRegistry.get(provider)()
        line = adapter.serialize_request(adapter.build_request(cid, payload, config))
        return answer_key(adapter, line, key_settings(config))

    def payload(content):
        return {
            "messages": [{"role": "user", "content": content}],
            "images": [],
            "output_name": "a",
            "output_type": "plain",
            "json_schema": None,
        }

    text, other = payload("2+2?"), payload("2+3?")
    for provider in ("openai", "anthropic", "gemini", "mistral"):
        base = key(provider, "a-text-0", text, model="m1")
        assert key(provider, "b-text-7", text, model="m1") == base  # only the id differs
        assert key(provider, "a-text-0", other, model="m1") != base  # the prompt
        assert key(provider, "a-text-0", text, model="m2") != base  # the model
        assert key(provider, "a-text-0", text, model="m1", max_chunk_bytes=1 << 20) == base
    openai = key("openai", "a-text-0", text, model="m1")
    assert key("openai", "a-text-0", text, model="m1", temperature=0.5) != openai
    assert key("openai", "a-text-0", text, model="m1", base_url="http://x/v1") != openai
    assert key("anthropic", "a-text-0", text, model="m1") != openai  # the provider


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini", "mistral"])
def test_merge_checks_from_the_request_dict_equal_the_lines(provider):
    """What a merge computes from each rebuilt request's dict, without parsing its line
    (hash_and_answer_key, on the lines KeepRequests makes), equals the request hash and
    the answer key of the line itself: non-ASCII text (hashed escaped, keyed as is), DEL,
    a character outside the BMP, images, a JSON schema, and another provider's id field."""
    from mmirage_beam.providers.base import BatchAdapterRegistry
    from mmirage_beam.providers.config import BatchProviderConfigRegistry
    from mmirage_beam.reuse import answer_key, canonical_settings, hash_and_answer_key, key_settings
    from mmirage_beam.run.receipts import request_line_hash
    from mmirage_beam.transforms.merge import KeepRequests

    config = BatchProviderConfigRegistry.get(provider)(
        provider=provider, model="m1", temperature=0.25
    )
    adapter_cls = BatchAdapterRegistry.get(provider)
    plain, keeping = adapter_cls(), KeepRequests(adapter_cls)()
    settings = key_settings(config)
    schema = {"type": "object", "properties": {"é": {"type": "string"}}, "required": ["é"]}
    for n, content in enumerate(["2+2?", 'Ça coûte 3 € \x7f 😀 \\ " \n\t', "x" * 5000]):
        image = {
            "source": "a.png",
            "url": "data:image/png;base64,aGVsbG8=",
            "data": "aGVsbG8=",
            "media_type": "image/png",
        }
        payload = {
            "messages": [
                {
                    "role": "user",
                    "content": (
                        [{"type": "text", "text": content}]
                        + [{"type": "image_url", "image_url": {"url": image["url"]}}]
                        if n == 1
                        else content
                    ),
                }
            ],
            "images": [image] if n == 1 else [],
            "output_name": "a",
            "output_type": "JSON" if n == 1 else "plain",
            "json_schema": schema if n == 1 else None,
        }
        request = plain.build_request(f"a-text-{n}", payload, config)
        line = plain.serialize_request(request)
        kept = keeping.serialize_request(keeping.build_request(f"a-text-{n}", payload, config))
        assert kept == line and kept.request == request  # the same bytes, and its dict
        expected = (request_line_hash(line), answer_key(plain, line, settings))
        assert hash_and_answer_key(plain, kept.request, canonical_settings(settings)) == expected
        assert hash_and_answer_key(plain, json.loads(line), None) == (expected[0], None)
    # A key that is not a str, at any depth (``logit_bias: {10: 1, 9: 2}`` from YAML):
    # the line's keys are strings, sorted as strings, so the dict is read as the line is.
    request = plain.build_request("a-text-9", payload, config)
    request["extra"] = {"nested": {10: 1, 9: 2}}
    line = plain.serialize_request(request)
    expected = (request_line_hash(line), answer_key(plain, line, settings))
    assert hash_and_answer_key(plain, request, canonical_settings(settings)) == expected


def test_answers_of_other_settings_are_not_looked_up(tmp_path, provider_env, capsys):
    """Issue 38: reuse asked the provider about every earlier batch, also those made with
    another base_url or endpoint, whose answers can never match (each 404 retried for a
    minute, then blamed on "expired"). Answers carry their settings' key: the others are
    not looked up; a 404 on the batch itself says "not found", not "expired"."""
    fake = provider_env
    cfg = _config(tmp_path, fake)
    cfg_path = write_config(tmp_path, cfg)
    assert submit_main(["--config", cfg_path]) == 0
    assert _merge(tmp_path, cfg_path, "first.jsonl")[0] == 0
    answers = _read_jsonl(next((tmp_path / "meta").glob("batch_metadata.answers.*.jsonl")))
    assert len(answers) == ROWS and all(len(a["settings_key"]) == 16 for a in answers)
    capsys.readouterr()

    # the same requests to another endpoint: nothing can match, no batch is looked up
    other = json.loads(json.dumps(cfg))
    other["processors"][0]["base_url"] = fake.openai_base_url.rstrip("/") + "/"
    write_config(tmp_path, other)
    lookups = dict(fake.call_counts())
    assert submit_main(["--config", cfg_path, "--new-run"]) == 0
    out = capsys.readouterr()
    counts = fake.call_counts()
    for call in ("batches_retrieve", "files_retrieve"):
        assert counts.get(call, 0) == lookups.get(call, 0), call
    assert f"{ROWS} earlier answer(s) were made with other provider settings" in out.err
    assert len(_sent(fake)) == 2 * ROWS  # sent again

    # an answers line of these settings whose batch this account does not know
    write_config(tmp_path, cfg)
    for path in (tmp_path / "meta").glob("batch_metadata.answers.*.jsonl"):
        lines = _read_jsonl(path)
        for a in lines:
            a["provider_batch_id"] = "batch_of_another_account"
        path.write_text("".join(json.dumps(a) + "\n" for a in lines), encoding="utf-8")
    assert submit_main(["--config", cfg_path, "--new-run"]) == 0
    err = capsys.readouterr().err
    assert "batch batch_of_another_account not found on this endpoint or account" in err
    assert "expired" not in err


def test_runs_calls_an_all_reused_run_by_its_state(tmp_path, provider_env, capsys):
    """Issue 38: ``mmirage runs`` called a run whose answers were all reused
    "unfinished", even after its merge."""
    from pipelines.runs import main as runs_main

    fake = provider_env
    cfg_path = write_config(tmp_path, _config(tmp_path, fake))
    assert submit_main(["--config", cfg_path, "--run-id", "paid"]) == 0
    assert _merge(tmp_path, cfg_path, "first.jsonl")[0] == 0
    assert submit_main(["--config", cfg_path, "--run-id", "reused"]) == 0
    assert len(_sent(fake)) == ROWS  # nothing sent the second time
    assert _merge(tmp_path, cfg_path, "second.jsonl")[0] == 0
    capsys.readouterr()
    assert runs_main(["--config", cfg_path]) == 0
    rows = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines()[1:-1]}
    assert set(rows) == {"paid", "reused"}
    for line in rows.values():
        assert " merged " in line and "unfinished" not in line, rows


def test_a_dry_run_says_which_requests_reuse_leaves_out(tmp_path, provider_env, capsys):
    """Issue 38: a dry run whose requests all had reusable answers exported nothing yet
    printed an ``exported prompts:`` path that did not exist. The summary says the
    reused requests are not exported, and the flag that exports them all."""
    fake = provider_env
    cfg = _config(tmp_path, fake)
    cfg_path = write_config(tmp_path, cfg)
    assert submit_main(["--config", cfg_path]) == 0
    assert _merge(tmp_path, cfg_path, "first.jsonl")[0] == 0
    capsys.readouterr()

    def dry(name, *flags):
        assert (
            submit_main(["--config", cfg_path, "--new-run", "--export-prompts", name, *flags]) == 0
        )
        return capsys.readouterr().out

    out = dry(str(tmp_path / "all.jsonl"))
    assert list(tmp_path.glob("all.*")) == []
    assert (
        f"exported prompts:    none (each of the {ROWS} request(s) would reuse an earlier "
        "answer; --no-reuse exports every request)"
    ) in out, out
    out = dry(str(tmp_path / "every.jsonl"), "--no-reuse")
    assert len(_read_jsonl(next(tmp_path.glob("every.*.jsonl")))) == ROWS
    write_config(tmp_path, _second_output(json.loads(json.dumps(cfg))))
    out = dry(str(tmp_path / "half.jsonl"))
    assert len(_read_jsonl(next(tmp_path.glob("half.*.jsonl")))) == ROWS  # the hints
    assert f"not exported:      {ROWS} request(s) that would reuse an earlier answer" in out
