"""Both pipelines translated to a Dataflow job, offline (needs ``mmirage-beam[gcp]``).

The submit and merge pipelines are built by the same functions the drivers call
(``build_submit_pipeline``, ``build_merge_pipeline``) on a ``beam.Pipeline`` with
``--runner DataflowRunner --dry_run True`` (Beam's TestOptions: the DataflowRunner builds
the job, its SDK environment and the files it would stage, then returns before creating
a client or calling Google) and dummy ``--project``/``--region``/``gs://`` locations. The
job environment a submission would send is rebuilt from that job with Beam's own
``apiclient.Environment``. Nothing here opens a network connection to Google.

The datasets are local files: ``ReadDatasets`` lists its inputs while the pipeline is
built, and listing ``gs://`` needs credentials. Outputs (receipts, placeholders, the
merged file) are ``gs://`` paths, as on a real Dataflow job.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import uuid
from pathlib import Path

import pytest
import yaml

from tests.conftest import GSM8K_JSONL, REPO

pytest.importorskip(
    "apache_beam.runners.dataflow.internal.apiclient",
    reason="the Dataflow runner needs the gcp extra: pip install -e '.[gcp]'",
)

# Recognisable, and made at run time: the staged package also holds tests/test*.py
# (setuptools' sdist default), so a literal key here would be found in this very file.
FAKE_KEY = "sk-FAKE-" + uuid.uuid4().hex
DATAFLOW_FLAGS = [
    "--runner",
    "DataflowRunner",
    "--dry_run",
    "True",
    "--project",
    "mmirage-offline-test",
    "--region",
    "us-central1",
    "--temp_location",
    "gs://mmirage-offline-test/tmp",
    "--setup_file",
    str(REPO / "setup.py"),
    "--num_workers",
    "4",
    "--machine_type",
    "n2-standard-2",
]


def _config(tmp_path: Path, base_url: str, metadata: str) -> str:
    rows = GSM8K_JSONL.read_text(encoding="utf-8").splitlines()[:40]
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    cfg = {
        "processors": [
            {
                "type": "batch_api",
                "provider": "openai",
                "base_url": base_url,
                "max_requests_per_chunk": 10,
                "metadata_output_path": metadata,
            }
        ],
        "loading_params": {
            "datasets": [
                {"path": str(data), "type": "JSONL", "output_dir": "gs://mmirage-offline-test/s"}
            ]
        },
        "processing_params": {
            "inputs": [{"name": "question", "key": "question"}],
            "outputs": [
                {
                    "name": "answer",
                    "type": "batch_api",
                    "output_type": "plain",
                    "prompt": "Answer concisely:\n{{ question }}",
                }
            ],
            "remove_columns": True,
            "output_schema": {"question": "{{ question }}", "answer": "{{ answer }}"},
        },
        "execution_params": {"mode": "local"},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return str(path)


def _translate(build) -> dict:  # noqa: ANN001
    """Run ``build(pipeline)`` on a dry-run DataflowRunner pipeline; return the job's
    experiments, stateful transforms, staged files and serialised forms."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import DebugOptions, PipelineOptions
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import beam_runner_api_pb2
    from apache_beam.runners.dataflow.internal import apiclient

    pipeline = beam.Pipeline(options=PipelineOptions(DATAFLOW_FLAGS))
    build(pipeline)
    result = pipeline.run()
    job = result.job  # apiclient.Job: the Dataflow job a real run would create
    proto = job.proto_pipeline
    environment = apiclient.Environment(
        packages=[],
        options=job.options,
        environment_version="8",
        proto_pipeline_staged_url="gs://mmirage-offline-test/staging/pipeline.pb",
        proto_pipeline=proto,
    ).proto
    stateful = []
    for t in proto.components.transforms.values():
        if t.spec.urn == common_urns.primitives.PAR_DO.urn:
            payload = beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload)
            if payload.state_specs or payload.timer_family_specs:
                stateful.append(t.unique_name)
    staged = {}  # staged name -> the bytes a real run would upload
    folders = set()
    for env in proto.components.environments.values():
        for dep in env.dependencies:
            path = Path(beam_runner_api_pb2.ArtifactFilePayload.FromString(dep.type_payload).path)
            name = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(
                dep.role_payload
            ).staged_name
            staged[name] = path.read_bytes()
            folders.add(path.parent)
    for folder in folders:  # Beam's temporary staging folders
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "experiments": list(environment.experiments),
        "debug_experiments": job.options.view_as(DebugOptions).experiments or [],
        "stateful": stateful,
        "staged": staged,
        "serialised": [
            proto.SerializeToString(),
            str(environment).encode(),
            json.dumps(job.options.get_all_options(), default=str).encode(),
            str(job).encode(),
        ],
        "environment": environment,
    }


def _assert_dataflow_job(job: dict) -> None:
    # Runner v2 (the portable Fn API workers) is what the job asks for.
    assert "use_runner_v2" in job["experiments"] and "beam_fn_api" in job["experiments"]
    # The package built from setup.py is staged, with the modules the workers import.
    tarball = job["staged"]["workflow.tar.gz"]
    with tarfile.open(fileobj=io.BytesIO(tarball)) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    names = list(files)
    assert any(n.endswith("mmirage_beam/transforms/submit.py") for n in names), names
    assert any(n.endswith("pipelines/merge.py") for n in names), names
    assert any(n.endswith("/setup.py") for n in names), names
    # The key of the launcher's environment is in no staged file, option or proto.
    blobs = dict(files)
    blobs.update(job["staged"])
    blobs.update({f"serialised job part {i}": b for i, b in enumerate(job["serialised"])})
    leaked = [name for name, blob in blobs.items() if FAKE_KEY.encode() in blob]
    assert not leaked, f"the API key is in {leaked}"
    wp = job["environment"].worker_pools[0]
    assert wp.num_workers == 4 and wp.machine_type == "n2-standard-2"


def test_submit_pipeline_translates_to_a_runner_v2_dataflow_job(tmp_path, monkeypatch):
    from mmirage_beam.config import load_config
    from mmirage_beam.providers.base import BatchAdapterRegistry, resolve_credentials
    from mmirage_beam.transforms.submit_rows import build_submit_pipeline

    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    config = load_config(
        _config(tmp_path, "http://127.0.0.1:9/v1", "gs://mmirage-offline-test/meta/m.jsonl")
    )
    adapter_cls = BatchAdapterRegistry.get("openai")
    assert resolve_credentials(adapter_cls, "openai") == {"api_key": FAKE_KEY}  # as the driver
    job = _translate(lambda p: build_submit_pipeline(p, config, "dataflow1"))
    _assert_dataflow_job(job)
    assert any("ChunkRequests/" in n for n in job["stateful"]), job["stateful"]
    assert not os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")


def test_merge_pipeline_translates_to_a_runner_v2_dataflow_job(tmp_path, monkeypatch, capsys):
    """Receipts of a real (DirectRunner) submission to the fake, then the merge of that
    run translated for Dataflow, with the merged file on gs://."""
    from mmirage_beam.config import load_config
    from mmirage_beam.run.selection import select_run
    from mmirage_beam.testing import FakeProviderServer
    from mmirage_beam.transforms.merge_rows import build_merge_pipeline
    from pipelines.submit import main as submit_main

    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    with FakeProviderServer() as fake:
        path = _config(tmp_path, fake.openai_base_url, str(tmp_path / "meta" / "m.jsonl"))
        # The submission runs locally: its receipts are what the merge is built from.
        cfg = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        cfg["loading_params"]["datasets"][0]["output_dir"] = str(tmp_path / "shards")
        Path(path).write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        assert submit_main(["--config", path, "--run-id", "dfmerge"]) == 0
        config = load_config(path)
        sel = select_run(config, [], "dfmerge", "merge")
        assert len(sel.batches) == 4 and not sel.pending
    capsys.readouterr()
    job = _translate(
        lambda p: build_merge_pipeline(
            p,
            config,
            sel.batches,
            sel.entries,
            sel.providers,
            "gs://mmirage-offline-test/out/merged.jsonl",
        )
    )
    _assert_dataflow_job(job)


def test_merge_dry_run_on_dataflow_prints_no_summary(tmp_path, monkeypatch, capsys):
    """``mmirage merge ... --runner DataflowRunner --dry_run True`` with receipts on the
    local disk is refused before any job is built (exit 2, naming the key), and prints no
    totals of a merge it never wrote."""
    from mmirage_beam.testing import FakeProviderServer
    from pipelines.merge import main as merge_main
    from pipelines.submit import main as submit_main

    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    with FakeProviderServer() as fake:
        path = _config(tmp_path, fake.openai_base_url, str(tmp_path / "meta" / "m.jsonl"))
        cfg = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        cfg["loading_params"]["datasets"][0]["output_dir"] = str(tmp_path / "shards")
        Path(path).write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        assert submit_main(["--config", path, "--run-id", "dfdry"]) == 0
        capsys.readouterr()
        out = tmp_path / "merged.jsonl"
        code = merge_main(["--config", path, "--output-path", str(out), *DATAFLOW_FLAGS])
    printed = capsys.readouterr()
    assert code == 2, printed.err
    assert "processors[0].metadata_output_path" in printed.err and "gs://" in printed.err
    assert not out.exists()
    assert "merged file:" not in printed.out and "rows written:" not in printed.out
