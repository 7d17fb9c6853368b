"""The contract module depends on nothing below it; the built-ins still register."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

BASE = Path(__file__).resolve().parents[2] / "mmirage_beam" / "providers" / "base.py"


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_base_imports_no_adapter():
    imported = _imported_modules(BASE)
    packages = {p.name for p in BASE.parent.iterdir() if (p / "__init__.py").is_file()}
    assert packages >= {"openai", "anthropic", "gemini", "mistral", "vertex"}, packages
    adapters = {
        m
        for m in imported
        if m.startswith("mmirage_beam.providers.") and m.split(".")[2] in packages
    }
    assert adapters == set(), adapters


def test_builtins_registered_through_the_package():
    code = (
        "from mmirage_beam.providers.base import BatchAdapterRegistry as R\n"
        "import sys\n"
        "print(R.names())\n"
        "print(R.get('openai').__module__, R.get('anthropic').__module__)\n"
        "print(*(m in sys.modules for m in ('openai', 'anthropic', 'google.genai', 'mistralai',"
        " 'mmirage_beam.providers.bedrock.fake')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert (
        out[0] == "['anthropic', 'azure-openai', 'bedrock', 'gemini', 'groq', 'mistral', 'openai', "
        "'together', 'vertex']"
    )
    assert (
        out[1] == "mmirage_beam.providers.openai.adapter mmirage_beam.providers.anthropic.adapter"
    )
    # registering imports no SDK (boto3 is Beam's own S3 filesystem's import), nor
    # Bedrock's fake (registered by its path only)
    assert out[2] == "False False False False False"
