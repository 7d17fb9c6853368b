"""The package's face: ``mmirage_beam.__all__`` names the public API, each name loads
from its module on first use, and importing the package loads neither Beam nor an SDK."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import mmirage_beam


def test_importing_the_package_loads_no_beam_and_no_sdk():
    code = (
        "import sys, mmirage_beam\n"
        "heavy = ('apache_beam', 'openai', 'anthropic', 'google.genai', 'mistralai')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("name", [n for n in mmirage_beam.__all__ if n != "__version__"])
def test_every_public_name_is_its_modules_own(name):
    value = getattr(mmirage_beam, name)
    home = importlib.import_module(mmirage_beam._HOMES[name])
    assert getattr(home, name) is value
    assert name in getattr(home, "__all__", (name,)), f"{home.__name__}.__all__ lacks {name}"


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        mmirage_beam.no_such_name  # noqa: B018


def test_submodules_still_import_through_the_package():
    from mmirage_beam import jsonl

    assert jsonl.json_line({"a": 1}) == b'{"a": 1}\n'
