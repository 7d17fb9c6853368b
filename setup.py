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
# Beam YAML (python -m apache_beam.yaml.main): Beam's own extra (pandas, jsonschema, ...).
_YAML = _beam_requirement().replace("apache-beam", "apache-beam[yaml]", 1)

setup(
    name="mmirage-beam",
    version="0.1.0",
    description=(
        "Declarative provider batch-API pipelines (OpenAI, Anthropic) on Apache Beam, "
        "compatible with MMIRAGE batch_api configs"
    ),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["mmirage_beam", "mmirage_beam.*", "pipelines"]),
    package_data={"mmirage_beam": ["examples/**/*", "examples/*", "costs/prices.json"]},
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
            _GCP,
            _YAML,
        ],
        # DataflowRunner and gs://: Beam's own extra, at requirements.txt's Beam version.
        "gcp": [_GCP],
        # Beam YAML pipelines over mmirage_beam.yaml_transforms.
        "yaml": [_YAML],
    },
    entry_points={"console_scripts": ["mmirage=mmirage_beam.cli:main"]},
)
