"""API keys never leak, and ``<PROVIDER>_API_KEY_FILE`` works on the workers.

A recognisable fake key is put in the environment and the submit pipeline is run
against the embedded fake provider (a dry run, a run at DEBUG, a run whose batch creates
fail permanently); then the key is searched for in every file written, all captured
output and log records, the pickled DoFns and the serialised pipeline, and the pipeline
options Beam records.
"""

from __future__ import annotations

import base64
import binascii
import bz2
import json
import logging
import os
import secrets
import zlib
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.internal import pickler
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.job.utils import dict_to_struct

from mmirage_beam.config import load_config
from mmirage_beam.testing import FakeProviderServer
from mmirage_beam.transforms.submit_rows import build_submit_pipeline
from pipelines.submit import main as run_main
from tests.conftest import GSM8K_JSONL, REPO, base_config, write_config

ENV_VAR = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def _leak_key() -> str:
    return f"sk-LEAKCHECK-{secrets.token_hex(16)}"


def _small_config(tmp_path: Path, provider: str, fake: FakeProviderServer, rows: int = 12):
    lines = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:rows]
    lines.insert(3, '{"question": null}')  # one invalid row: the invalid-rows file
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    base_url = fake.openai_base_url if provider == "openai" else fake.anthropic_base_url
    cfg = base_config(tmp_path, provider, base_url=base_url, max_requests_per_chunk=5)
    cfg["loading_params"]["datasets"][0]["path"] = str(data)
    cfg["processing_params"]["outputs"].append(
        {
            "name": "facts",
            "type": "batch_api",
            "output_type": "JSON",
            "prompt": "List the numbers in: {{ question }}",
            "output_schema": ["numbers"],
        }
    )
    return write_config(tmp_path, cfg)


# -- where a key could hide --------------------------------------------------------------


def _variants(key: str) -> list[bytes]:
    """The key as it could appear in bytes: plain, UTF-16, base64 (e.g. Basic auth)."""
    raw = key.encode()
    return [raw, key.encode("utf-16-le"), base64.b64encode(raw), base64.b64encode(raw)[:-4]]


def _decoded_pickles(blob: bytes) -> list[bytes]:
    """A Beam-pickled payload (base64 of bz2/zlib of a pickle) and what it decodes to."""
    out = [blob]
    try:
        packed = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        return out
    for decompress in (bz2.decompress, zlib.decompress):
        try:
            out.append(decompress(packed))
        except (OSError, ValueError, zlib.error):
            pass
    return out


def _leaks(key: str, blob: bytes) -> bool:
    return any(v in part for part in _decoded_pickles(blob) for v in _variants(key))


def _files_holding(root: Path, key: str, skip: tuple[Path, ...] = ()) -> tuple[int, list[str]]:
    count, found = 0, []
    for path in root.rglob("*"):
        if path.is_file() and path not in skip:
            count += 1
            data = path.read_bytes()
            if any(v in data for v in _variants(key)):
                found.append(str(path))
    return count, found


def _pipeline_blobs(p: beam.Pipeline) -> list[bytes]:
    """Every DoFn / CombineFn of ``p`` pickled as Beam ships it, and the pipeline proto."""
    blobs: list[bytes] = []

    class _Visitor(beam.pipeline.PipelineVisitor):
        def _add(self, node) -> None:  # noqa: ANN001
            t = node.transform
            for obj in (getattr(t, "fn", None), getattr(t, "_fn", None), t):
                if obj is None:
                    continue
                try:
                    blobs.append(pickler.dumps(obj))
                except Exception:  # composite transforms holding PCollections
                    pass

        visit_transform = _add
        enter_composite_transform = _add

    p.visit(_Visitor())
    proto = p.to_runner_api()
    blobs.append(proto.SerializeToString())
    for t in proto.components.transforms.values():
        if t.spec.urn == common_urns.primitives.PAR_DO.urn:
            payload = beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload)
            blobs.append(payload.do_fn.payload)
        elif t.spec.urn == common_urns.composites.COMBINE_PER_KEY.urn:
            payload = beam_runner_api_pb2.CombinePayload.FromString(t.spec.payload)
            blobs.append(payload.combine_fn.payload)
    for coder in proto.components.coders.values():
        blobs.append(coder.spec.payload)
    return blobs


def test_the_detectors_find_a_planted_key():
    """Positive control: a key captured by a DoFn is found in the pickles and the proto."""
    key = _leak_key()
    p = beam.Pipeline()
    _ = p | beam.Create([1]) | "Planted" >> beam.Map(lambda x, k=key: (x, k))
    blobs = _pipeline_blobs(p)
    assert sum(_leaks(key, b) for b in blobs) >= 2  # the visitor's pickle and the proto's
    assert not any(_leaks(_leak_key(), b) for b in blobs)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_key_appears_nowhere(tmp_path, capsys, caplog, monkeypatch, provider_env, provider):
    fake = provider_env
    key = _leak_key()
    monkeypatch.setenv(ENV_VAR[provider], key)
    caplog.set_level(logging.DEBUG)
    # -v puts mmirage at DEBUG; the SDKs and their HTTP client go to DEBUG as well here,
    # as a user chasing a problem would set them (OPENAI_LOG=debug ...).
    from mmirage_beam.launch import drivers

    configure = drivers.configure_logging

    def configure_all_debug(verbose: bool = False) -> None:
        configure(verbose)
        for name in ("openai", "anthropic", "httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.DEBUG)

    monkeypatch.setattr(drivers, "configure_logging", configure_all_debug)
    config = _small_config(tmp_path, provider, fake)

    # 1. A dry run (export, dry-run receipts, placeholders).
    export = tmp_path / "export" / "prompts.jsonl"
    argv = ["--config", config, "-v", "--skip-invalid-rows"]
    assert run_main([*argv, "--run-id", "dry", "--export-prompts", str(export)]) == 0
    # 2. A submission at DEBUG (receipts, parts, placeholders, invalid-rows file).
    assert run_main([*argv, "--run-id", "ok"]) == 0
    assert len(fake.submitted_requests(provider)) == 2 * 12
    # 3. A submission whose batch creates fail for good: the SDK's errors, our message.
    fake.script(fail_batch_creates={"nth": 1, "permanent": True})
    assert run_main([*argv, "--run-id", "fails"]) == 1
    fake.script(fail_batch_creates=None)
    captured = capsys.readouterr()
    assert "the pipeline failed" in captured.err  # the failure really happened
    assert "Error" in captured.err or "error" in captured.err

    # Files: export, receipts (and their parts), placeholders, invalid rows, config.
    count, holding = _files_holding(tmp_path, key)
    assert count >= 6 and holding == []
    assert (tmp_path / "export" / "prompts.dry.jsonl").is_file()
    assert list((tmp_path / "meta").glob("batch_metadata.invalid_rows.*.jsonl"))
    assert list((tmp_path / "meta").glob("batch_metadata.text.ok.jsonl"))
    # Output and logs.
    assert key not in captured.out and key not in captured.err
    debug_from = {r.name.split(".")[0] for r in caplog.records if r.levelno == logging.DEBUG}
    assert {"mmirage_beam", provider} <= debug_from
    for record in caplog.records:
        text = record.getMessage() + str(record.exc_info or "") + str(record.exc_text or "")
        assert key not in text, record
    assert key not in caplog.text

    # The pipeline as Beam pickles and records it, built with the key in the environment.
    options = PipelineOptions(["--runner=DirectRunner"])
    p = beam.Pipeline(options=options)
    build_submit_pipeline(p, load_config(config), "pickled")
    blobs = _pipeline_blobs(p)
    assert len(blobs) > 20
    assert not [b[:80] for b in blobs if _leaks(key, b)]
    recorded = p.options.get_all_options(retain_unknown_options=True)
    assert key not in json.dumps(recorded, default=str)
    assert not _leaks(key, dict_to_struct(recorded).SerializeToString())  # as job servers get it
    assert key not in str(p.options.display_data())
    assert os.environ[ENV_VAR[provider]] == key  # the key was there all along


@pytest.fixture
def auth_seen(monkeypatch):
    """The credentials every fake-provider request carried (the fake runs in-process)."""
    from mmirage_beam.testing.fake_provider.routing import RoutedFake

    seen: list[str] = []
    original = RoutedFake.handle  # every registered fake answers through it

    def recording(self, request):  # noqa: ANN001, ANN202
        header = request.headers.get("Authorization", "").partition(" ")[2]
        seen.append(header or request.headers.get("x-api-key", ""))
        return original(self, request)

    monkeypatch.setattr(RoutedFake, "handle", recording)
    return seen


def test_key_file_is_read_on_the_workers(tmp_path, capsys, monkeypatch, fake_provider, auth_seen):
    fake = fake_provider
    key = _leak_key()
    secret = tmp_path / "secrets" / "openai-key"
    secret.parent.mkdir()
    secret.write_text(key + "\n", encoding="utf-8")  # mounted secrets end with a newline
    monkeypatch.setenv("OPENAI_API_KEY_FILE", str(secret))
    assert "OPENAI_API_KEY" not in os.environ
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", pythonpath)  # worker processes import tests/pipelines
    config = _small_config(tmp_path, "openai", fake, rows=8)
    code = run_main(
        [
            "--config",
            config,
            "--run-id",
            "kf",
            "--skip-invalid-rows",
            "--direct_num_workers=2",
            "--direct_running_mode=multi_processing",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    held = fake.submitted_requests("openai")
    assert len(held) == 2 * 8 and set(fake.create_counts().values()) == {1}
    # Every call the workers made carried exactly the key from the file, stripped.
    assert auth_seen and set(auth_seen) == {key}
    assert key not in out and key not in err
    assert _files_holding(tmp_path, key, skip=(secret,))[1] == []


@pytest.mark.parametrize("problem", ["missing", "empty", "directory"])
def test_unreadable_key_file_is_a_clear_error(tmp_path, capsys, monkeypatch, problem):
    other_key = _leak_key()
    monkeypatch.setenv("ANTHROPIC_API_KEY", other_key)  # present, but not for this provider
    path = tmp_path / "no-such-secret"
    if problem == "empty":
        path.write_text("\n", encoding="utf-8")
    elif problem == "directory":
        path.mkdir()
    monkeypatch.setenv("OPENAI_API_KEY_FILE", str(path))
    config = write_config(tmp_path, base_config(tmp_path, "openai"))
    assert run_main(["--config", config, "--run-id", "nokey"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("mmirage: error: ")  # a credentials error, not the config's
    if problem == "empty":
        assert "needs OPENAI_API_KEY" in err and "OPENAI_API_KEY_FILE" in err
    else:
        assert f"OPENAI_API_KEY_FILE points to {str(path)!r}, which cannot be read" in err
    assert "sk-" not in err and "sk-" not in out and other_key not in err
    assert not (tmp_path / "meta").exists() and not (tmp_path / "shards").exists()
