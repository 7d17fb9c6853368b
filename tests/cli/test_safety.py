"""What a newcomer's slip must never do: destroy files, spend money, or hang."""

from __future__ import annotations

import json

import pytest

from pipelines.check import main as check_main
from pipelines.merge import main as merge_main
from pipelines.resubmit import main as resubmit_main
from pipelines.submit import main as submit_main
from tests.conftest import GSM8K_JSONL, base_config, write_config


@pytest.fixture
def submitted(tmp_path, provider_env):
    fake = provider_env
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(GSM8K_JSONL.read_text().splitlines()[:20]) + "\n")
    cfg = base_config(tmp_path, base_url=fake.openai_base_url)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    path = write_config(tmp_path, cfg)
    assert submit_main(["--config", path, "--run-id", "safe1"]) == 0
    return tmp_path, path, fake


def test_merge_never_replaces_a_folder_the_data_or_the_receipts(submitted, capsys):
    tmp_path, cfg, _fake = submitted
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "keep.txt").write_text("precious")
    receipts = tmp_path / "meta" / "batch_metadata.text.safe1.jsonl"
    before = receipts.read_bytes(), (tmp_path / "rows.jsonl").read_bytes()
    for out, why in [
        (folder, "is a folder"),
        (tmp_path / "meta", "is a folder"),
        (tmp_path / "rows.jsonl", "would overwrite loading_params.datasets[0].path"),
        (receipts, "receipts and run files"),
    ]:
        assert merge_main(["--config", cfg, "--output-path", str(out)]) == 2
        assert why in capsys.readouterr().err
    assert (folder / "keep.txt").read_text() == "precious"
    assert (receipts.read_bytes(), (tmp_path / "rows.jsonl").read_bytes()) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["--run-id", ""],
        ["--export-prompts", ""],
        ["--export-prompts", " "],
        ["--skip-invalid-row"],  # a prefix of --skip-invalid-rows
        ["--export-prompt", "x.jsonl"],
    ],
)
def test_empty_values_and_flag_prefixes_are_refused(tmp_path, provider_env, argv):
    fake = provider_env
    cfg = write_config(tmp_path, base_config(tmp_path, base_url=fake.openai_base_url))
    with pytest.raises(SystemExit) as exc:
        code = submit_main(["--config", cfg, *argv])
        raise SystemExit(code)
    assert exc.value.code == 2
    assert fake.batches() == [] and not list(tmp_path.glob("*exported*"))


def test_wrong_files_are_one_clear_error(submitted, capsys):
    tmp_path, cfg, _fake = submitted
    merged = tmp_path / "merged.jsonl"
    assert merge_main(["--config", cfg, "--output-path", str(merged)]) == 0
    capsys.readouterr()
    assert resubmit_main(["--config", cfg, "--from", str(merged)]) == 2
    assert "is not a merge errors file" in capsys.readouterr().err
    assert resubmit_main(["--config", cfg, "--from", cfg]) == 2
    assert "is not an errors file" in capsys.readouterr().err
    assert check_main(["--config", cfg, "--metadata-path", str(tmp_path / "meta")]) == 2
    assert "is not a receipt file" in capsys.readouterr().err


def test_an_unreachable_job_service_is_refused_at_once(tmp_path, capsys):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = write_config(tmp_path, base_config(tmp_path))
    flags = [
        "--runner=PortableRunner",
        f"--job_endpoint=localhost:{port}",
        "--environment_type=LOOPBACK",
    ]
    out = ["--export-prompts", str(tmp_path / "p.jsonl")]
    assert submit_main(["--config", cfg, *out, *flags]) == 2
    err = capsys.readouterr().err
    assert "--job_endpoint" in err and "cannot reach the job service" in err
    assert json.dumps(err)  # one readable line, no traceback
    assert "Traceback" not in err


def test_demo_never_replaces_a_folder_it_did_not_make(tmp_path, capsys):
    from pipelines.demo import main as demo_main

    mine = tmp_path / "wd" / "openai"
    mine.mkdir(parents=True)
    (mine / "mine.txt").write_text("mine")
    assert demo_main(["--workdir", str(tmp_path / "wd"), "--rows", "3"]) == 2
    assert "not made by a demo" in capsys.readouterr().err
    assert (mine / "mine.txt").read_text() == "mine"
