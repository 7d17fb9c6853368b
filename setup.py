"""Packaging for mmirage-beam: ships ``mmirage_beam`` (and ``pipelines``) to Beam workers."""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent


def _requirements() -> list[str]:
    lines = (HERE / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def _beam_requirement() -> str:
    return next(r for r in _requirements() if r.startswith("apache-beam"))


_GCP = _beam_requirement().replace("apache-beam", "apache-beam[gcp]", 1)
# s3:// through Beam's own S3 filesystem (boto3), at requirements.txt's Beam version.
_AWS = _beam_requirement().replace("apache-beam", "apache-beam[aws]", 1)
# Beam YAML (python -m apache_beam.yaml.main): Beam's own extra (pandas, jsonschema, ...).
_YAML = _beam_requirement().replace("apache-beam", "apache-beam[yaml]", 1)
# google-genai for provider: gemini and vertex, tested with 2.34.0 (the lowest; the test
# extra resolves to it) and 3.6.1 (batches, files, count_tokens as the adapters and the
# fake use them; 3.x calls the API's v1 paths, 2.x v1beta, and the fake serves both).
# apache-beam[gcp]'s google-cloud-aiplatform 1.x still asks for google-genai<3, so the
# test extra resolves to 2.x (.ci/run then runs the Gemini tests on 3.x too); the gemini
# extra alone takes 3.x.
_GEMINI = "google-genai>=2.34,<4"
# provider: mistral (mmirage_beam/providers/mistral/), tested with mistralai 3.7.0; 3.x
# is where `mistralai.client.Mistral` lives.
_MISTRAL = "mistralai>=3.7.0,<4"
# provider: bedrock (mmirage_beam/providers/bedrock/): boto3's "bedrock" client with the
# batch inference operations (CreateModelInvocationJob...) and "s3". botocore 1.35.1
# (2024-08-19) is the first whose bedrock model has CreateModelInvocationJob (boto3
# 1.34.150, the old floor, failed: "'Bedrock' object has no attribute
# 'create_model_invocation_job'"); 1.42.81 the first whose GetModelInvocationJob output
# has totalRecordCount/successRecordCount/errorRecordCount, which the adapter reads for a
# job's progress (botocore's parser drops members its model lacks: on 1.35.1 to 1.42.80
# `mmirage check` shows no counts). `.ci/peers` runs the Bedrock tests on boto3 and
# botocore at this floor.
_BEDROCK = "boto3>=1.42.81"

setup(
    name="mmirage-beam",
    version="0.1.0",
    description=(
        "Declarative provider batch-API pipelines (OpenAI, Anthropic, Gemini) on Apache Beam, "
        "compatible with MMIRAGE batch_api configs"
    ),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["mmirage_beam", "mmirage_beam.*", "pipelines"]),
    package_data={
        "mmirage_beam": ["examples/**/*", "examples/*", "providers/*/prices.json", "ui/static/*"]
    },
    include_package_data=True,
    install_requires=_requirements(),
    extras_require={
        # The tests translate jobs for Dataflow offline, so they need the gcp extra too.
        # psutil: benchmarks/bench_scale.py measures the RSS of whole process trees.
        # The tests also run Beam YAML pipelines, so they need the yaml extra.
        "test": [
            "pytest==9.0.3",
            "pytest-timeout==2.4.0",
            # pytest-xdist: the suite runs its test files in 3 worker processes (-n 3);
            # most tests wait on subprocesses (Beam, the fake, job services).
            "pytest-xdist==3.8.0",
            "ruff==0.17.6",
            "pydantic>=2",
            "psutil==7.2.2",
            # datasets: tests read `merge --output-format hf` back with load_from_disk
            # (the tool writes that folder with pyarrow alone)
            "datasets==5.2.0",
            # hypothesis: tests/transforms/test_fuzz.py fuzzes the config loader, readers
            # and parsers.
            "hypothesis==6.170.17",
            _GEMINI,
            _GCP,
            _YAML,
            _MISTRAL,
            # Shared storage on real servers: s3:// on a moto S3 server, gs:// on a GCS
            # emulator (tests/storage_servers.py, tests/engines/test_s3_storage.py,
            # tests/engines/test_gcs_storage.py, tests/engines/test_engines.py).
            _AWS,
            "moto[server]==5.2.6",
            "gcp-storage-emulator==2026.7.19",
            # playwright: tests/cli/test_ui.py drives Debian's chromium (/usr/bin/chromium,
            # apt-get install chromium) through it; its bundled browsers are never fetched.
            "playwright==1.65.3",
        ],
        # provider: gemini (the Gemini API's batch mode through the official SDK).
        "gemini": [_GEMINI],
        # DataflowRunner and gs://: Beam's own extra, at requirements.txt's Beam version.
        "gcp": [_GCP],
        # s3:// (and S3-compatible servers: --s3_endpoint_url): Beam's own extra.
        "aws": [_AWS],
        # Beam YAML pipelines over mmirage_beam.beam_yaml.transforms.
        "yaml": [_YAML],
        # Opt-in: third-party batch clients driven against the fake provider
        # (tests/providers/test_third_party_clients.py, run by `.ci/peers` in a virtualenv
        # of its own). litellm, and the runtime dependencies of bespokelabs-curator that
        # resolve with requirements.txt (datasets<4 for curator: the test extra's 5.x
        # would not do); curator itself (and instructor) then go in with
        # `pip install --no-deps -r tests/clients-nodeps.txt` (that file says which of
        # their pins clash). Not in "test": it moves shared pins.
        "clients": [
            "pytest==9.0.3",
            "pytest-timeout==2.4.0",
            "datasets==3.6.0",
            "litellm==1.110.2",
            "xxhash==3.8.2",
            "posthog==3.25.0",
            "aiofiles==25.1.0",
            "nest-asyncio==1.6.0",
        ],
        # provider: mistral, through the official SDK.
        "mistral": [_MISTRAL],
        # provider: bedrock, through boto3 (the test extra has it through apache-beam[aws]).
        "bedrock": [_BEDROCK],
    },
    entry_points={"console_scripts": ["mmirage=pipelines.cli:main"]},
)
