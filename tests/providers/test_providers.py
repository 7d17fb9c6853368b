"""The provider plugin contract: registries, credentials, normalised statuses, and
MMIRAGE's documented Mistral example working with only its imports changed."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from mmirage_beam.config import config_from_dict
from mmirage_beam.errors import CredentialsError
from mmirage_beam.providers.base import (
    BatchAdapterRegistry,
    BatchSubmissionResult,
    credential_env_var,
    resolve_credentials,
)
from mmirage_beam.providers.openai.adapter import OpenAIBatchAdapter
from pipelines.submit import main as run_main
from tests.conftest import base_config, write_config


def test_credential_env_var_names():
    assert credential_env_var("azure-openai", "api_key") == "AZURE_OPENAI_API_KEY"
    assert credential_env_var("openai", "api_key") == "OPENAI_API_KEY"
    assert credential_env_var("my.gw", "token") == "MY_GW_TOKEN"


def test_resolve_credentials_env_and_file(tmp_path):
    assert resolve_credentials(OpenAIBatchAdapter, "openai", {"OPENAI_API_KEY": "k1"}) == {
        "api_key": "k1"
    }
    secret = tmp_path / "key"
    secret.write_text("k2\n")
    env = {"OPENAI_API_KEY_FILE": str(secret)}
    assert resolve_credentials(OpenAIBatchAdapter, "openai", env) == {"api_key": "k2"}
    with pytest.raises(CredentialsError, match="OPENAI_API_KEY") as info:
        resolve_credentials(OpenAIBatchAdapter, "openai", {})
    assert info.value.exit_code == 2


def test_adapter_pickles_without_credentials():
    adapter = OpenAIBatchAdapter({"api_key": "sk-very-secret"})
    blob = pickle.dumps(adapter)
    assert b"sk-very-secret" not in blob
    assert pickle.loads(blob).credentials == {}
    assert "secret" not in repr(adapter)


def test_status_normalisation():
    a = OpenAIBatchAdapter()
    for word, norm in [
        ("validating", "in_progress"),
        ("in_progress", "in_progress"),
        ("finalizing", "in_progress"),
        ("cancelling", "in_progress"),
        ("completed", "completed"),
        ("failed", "failed"),
        ("expired", "failed"),
        ("cancelled", "failed"),
        ("weird", "unknown"),
        (None, "unknown"),
    ]:
        assert a._normalize_status(word) == norm
    with pytest.raises(ValueError):
        BatchSubmissionResult("b", "running", {})


def test_registries_reject_wrong_types():
    from mmirage_beam.providers.config import BatchProviderConfigRegistry

    with pytest.raises(TypeError):
        BatchAdapterRegistry.register("x", dict)
    with pytest.raises(TypeError):
        BatchProviderConfigRegistry.register("x", dict)


def test_mistral_example_plugs_in(tmp_path, capsys, monkeypatch):
    import importlib

    from mmirage_beam.providers.config import BatchProviderConfigRegistry

    # The example registers "mistral" over the built-in: only for this test.
    for registry in (BatchAdapterRegistry, BatchProviderConfigRegistry):
        registry.names()  # the built-ins are registered first
        monkeypatch.setattr(registry, "_registry", dict(registry._registry))
    from examples.plugins import mistral_example

    mistral_example = importlib.reload(mistral_example)  # registers "mistral"

    cfg = base_config(tmp_path, "mistral")
    loaded = config_from_dict(cfg)
    assert isinstance(loaded.processor, mistral_example.MistralBatchConfig)
    assert loaded.processor.model == "mistral-small-latest"
    assert BatchAdapterRegistry.get("mistral") is mistral_example.MistralBatchAdapter

    path = write_config(tmp_path, cfg)
    # A real run needs MISTRAL_API_KEY, checked before any data is read.
    assert run_main(["--config", path]) == 2
    assert "MISTRAL_API_KEY" in capsys.readouterr().err

    # The dry run needs no key and exports the example's request shape.
    assert (
        run_main(
            ["--config", path, "--export-prompts", str(tmp_path / "m.jsonl"), "--run-id", "mis"]
        )
        == 0
    )
    out = capsys.readouterr().out
    # the example implements no token counting: "unknown", never "0"
    assert "1,319 request(s), input tokens unknown" in out, out
    assert "input tokens 0" not in out
    lines = [json.loads(x) for x in Path(tmp_path / "m.mis.jsonl").read_text().splitlines()]
    assert len(lines) == 1319
    req = next(ln["request"] for ln in lines if ln["request"]["custom_id"] == "answer-text-3")
    assert req["params"]["model"] == "mistral-small-latest"
    assert req["params"]["messages"][0]["role"] == "user"
    assert req["params"]["messages"][0]["content"].startswith("Answer concisely:\n")

    adapter = mistral_example.MistralBatchAdapter()
    result = adapter.parse_submission_result({"id": "job-1", "status": "running"})
    assert result == BatchSubmissionResult(
        "job-1", "in_progress", {"id": "job-1", "status": "running"}
    )
    assert adapter.parse_submission_result({"id": "j", "status": "SUCCESS"}).status == "completed"


def test_plugins_load_from_the_environment_in_the_cli(tmp_path):
    """`mmirage` itself can use a plugin: MMIRAGE_PLUGINS names modules to import."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    path = write_config(tmp_path, base_config(tmp_path, "mistral"))
    env = dict(os.environ, MMIRAGE_PLUGINS="examples.plugins.mistral_example", PYTHONPATH=str(REPO))
    cmd = [
        sys.executable,
        "-m",
        "pipelines.submit",
        "--config",
        path,
        "--export-prompts",
        str(tmp_path / "m.jsonl"),
        "--run-id",
        "plug",
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "m.plug.jsonl").exists()
    env["MMIRAGE_PLUGINS"] = "no_such_plugin_module"
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "no_such_plugin_module" in proc.stderr


def test_the_readme_plugin_example_works_from_a_fresh_folder(tmp_path):
    """`MMIRAGE_PLUGINS=my_pkg.mistral mmirage run ...` from the folder holding my_pkg,
    with no PYTHONPATH; a module that cannot be imported is named with the variable."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import REPO

    mmirage = Path(sys.executable).parent / "mmirage"
    if not mmirage.exists():
        pytest.skip("the mmirage console script is not installed in this environment")
    folder = tmp_path / "fresh"
    (folder / "my_pkg").mkdir(parents=True)
    (folder / "my_pkg" / "__init__.py").write_text("")
    shutil.copy(
        REPO / "examples" / "plugins" / "mistral_example.py", folder / "my_pkg" / "mistral.py"
    )
    path = write_config(tmp_path, base_config(tmp_path, "mistral"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["MMIRAGE_PLUGINS"] = "my_pkg.mistral"
    cmd = [str(mmirage), "run", "--config", path, "--export-prompts", str(tmp_path / "m.jsonl")]
    proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert list(tmp_path.glob("m.*.jsonl"))
    env["MMIRAGE_PLUGINS"] = "my_pkg.missing"
    proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "$MMIRAGE_PLUGINS" in proc.stderr and "my_pkg.missing" in proc.stderr
    assert "processors[0]" not in proc.stderr


def test_a_plugin_in_the_current_folder_wins_over_an_installed_package(tmp_path):
    """Some dependencies install a top-level ``tests`` package; a plugin module that exists
    in the current folder under such a name is imported from the folder, not shadowed."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    shadow = tmp_path / "site" / "tests"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")  # an installed `tests` without our module
    work = tmp_path / "work" / "tests"
    work.mkdir(parents=True)
    (work / "__init__.py").write_text("")
    (work / "myplug.py").write_text("LOADED = 'from the current folder'\n")
    code = (
        "import tests, sys\n"  # imported first from the shadowing package, as a hook might
        "from mmirage_beam.providers.registry import _import_plugin\n"
        "_import_plugin('tests.myplug')\n"
        "print(sys.modules['tests.myplug'].LOADED)\n"
    )
    script = tmp_path / "load.py"  # not `-c`, which puts the current folder on sys.path
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), str(REPO)]))
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path / "work",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "from the current folder"
