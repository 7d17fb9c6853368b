"""The import paths that moved (``mmirage_beam/compat.py``) still import, each as the
objects of its new home; no module of the package imports an old path."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from mmirage_beam import compat
from tests.conftest import REPO


@pytest.mark.parametrize(("old", "new"), sorted(compat.MODULE_ALIASES.items()))
def test_an_old_module_path_is_its_new_home(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)


def test_the_old_paths_import_in_a_fresh_interpreter_as_users_write_them():
    """As a plugin (the seed's import), a Beam YAML file and a Beam user write them,
    in a process where nothing imported the new homes first."""
    code = (
        "from mmirage_beam.config.batch_provider import BatchProviderConfig\n"
        "from mmirage_beam.providers.config import BatchProviderConfig as New\n"
        "assert BatchProviderConfig is New\n"
        "import mmirage_beam.yaml_transforms as old, mmirage_beam.beam_yaml.transforms as new\n"
        "assert old.SubmitBatches is new.SubmitBatches\n"
        "from mmirage_beam.pipeline import MergeRows, SubmitRows, build_merge_pipeline\n"
        "from mmirage_beam import SubmitRows as S\n"
        "assert SubmitRows is S\n"
        "from mmirage_beam.status import build_report\n"
        "from mmirage_beam.check.discovery import collect_receipts\n"
        "from mmirage_beam.check.lookup import BatchStatusChecker\n"
        "print('ok')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


@pytest.mark.parametrize("name", sorted(compat.PIPELINE_NAMES))
def test_every_name_of_the_old_pipeline_module(name):
    old = importlib.import_module(compat.PIPELINE_MODULE)
    home = importlib.import_module(compat.PIPELINE_NAMES[name])
    assert getattr(old, name) is getattr(home, name)


def test_an_unknown_name_of_the_old_pipeline_module_is_an_attribute_error():
    old = importlib.import_module(compat.PIPELINE_MODULE)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        old.nope  # noqa: B018


def test_no_module_of_the_package_or_its_drivers_imports_an_old_path():
    old = set(compat.MODULE_ALIASES) | {compat.PIPELINE_MODULE}
    found = []
    for path in [*(REPO / "mmirage_beam").rglob("*.py"), *(REPO / "pipelines").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            found += [f"{Path(path).relative_to(REPO)}: {n}" for n in names if n in old]
    assert found == []
