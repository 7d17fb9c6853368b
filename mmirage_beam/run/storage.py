"""Where the workers write, and whether the launcher can read it back.

Receipts are written by the workers (the moment a batch is accepted) and read back by
the launcher (to consolidate them, to resume, for ``check`` and ``merge``). A receipt
written where the launcher cannot see it would be a paid batch nobody can collect, so
before anything is submitted the launcher checks that every location the workers write
to is one it shares with them, and that it can write and read there itself.
"""

from __future__ import annotations

import ipaddress
import uuid
from typing import Any, Mapping, Optional, Sequence

from mmirage_beam.errors import ConfigError
from mmirage_beam.paths import is_uri
from mmirage_beam.run.layout import RunLayout, receipts_base

_IN_PROCESS_RUNNERS = {"", "directrunner", "direct", "switchingdirectrunner", "fnapirunner"}
_LOCAL_RUNNERS = _IN_PROCESS_RUNNERS | {"bundlebaseddirectrunner", "prismrunner", "prism"}
_PORTABLE_RUNNERS = {"portablerunner", "flinkrunner", "sparkrunner"}


def _runner_name(options: Mapping[str, Any]) -> str:
    runner = options.get("runner") or ""
    name = runner if isinstance(runner, str) else type(runner).__name__
    return name.rsplit(".", 1)[-1].lower()


def _is_loopback(hostport: Optional[str]) -> bool:
    if not hostport:
        return True
    host = str(hostport)
    if host.startswith("[") and host.endswith("]"):  # Flink's [local] / [auto]
        return host in ("[local]", "[auto]")
    host = host.rsplit(":", 1)[0].strip("[]") if host.count(":") <= 1 else host
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _all_options(options: Any) -> dict[str, Any]:
    if options is None:
        return {}
    return options.get_all_options(drop_default=False, retain_unknown_options=False)


def workers_in_launcher_process(options: Any) -> bool:
    """Whether the DoFns run in this very process (DirectRunner in memory or threads),
    so that per-process storage such as Beam's ``mem://`` filesystem is shared."""
    opts = _all_options(options)
    return (
        _runner_name(opts) in _IN_PROCESS_RUNNERS
        and opts.get("direct_running_mode") != "multi_processing"
    )


def workers_share_launcher_disk(options: Any) -> bool:
    """Whether the workers run on this machine and see its local disk.

    True for the DirectRunner (any mode), Prism, and portable runners (PortableRunner,
    FlinkRunner, SparkRunner) whose job endpoint or master is on loopback and whose SDK
    environment is ``LOOPBACK``, ``PROCESS`` or ``EXTERNAL`` on a loopback address.
    False for Dataflow, Docker environments and anything remote or unknown.
    """
    opts = _all_options(options)
    runner = _runner_name(opts)
    if runner in _LOCAL_RUNNERS:
        return True
    if runner not in _PORTABLE_RUNNERS:
        return False
    master = opts.get("flink_master") if runner == "flinkrunner" else None
    master = master or (opts.get("spark_master_url") if runner == "sparkrunner" else None)
    if not _is_loopback(opts.get("job_endpoint")) or not _is_loopback(master):
        return False
    env = str(opts.get("environment_type") or "DOCKER").upper()
    if env in ("LOOPBACK", "PROCESS"):
        return True
    if env == "EXTERNAL":
        return _is_loopback(str(opts.get("environment_config") or ""))
    return False  # DOCKER (the portable default): containers see their own disk


def check_locations(locations: Mapping[str, str], options: Any) -> None:
    """Refuse output locations the workers and the launcher do not both see.

    Args:
        locations: config key or flag -> the path the workers will write to.
        options: the pipeline options (runner and environment).

    Raises:
        ConfigError: naming the key, when a local path is used on a runner whose workers
        may not share the launcher's disk (use a URI of a shared filesystem, e.g.
        ``gs://bucket/...``), or ``mem://`` with workers in other processes.
    """
    in_process = workers_in_launcher_process(options)
    shared_disk = workers_share_launcher_disk(options)
    runner = _runner_name(_all_options(options)) or "DirectRunner"
    for key, path in locations.items():
        if not path:
            continue
        if path.startswith("mem://") and not in_process:
            raise ConfigError(
                key,
                f"{path} is in this process's memory (mem://), which workers in other "
                f"processes ({runner}) cannot see; use a disk path or a shared filesystem",
            )
        if not is_uri(path) and not shared_disk:
            raise ConfigError(
                key,
                f"{path} is a local path, but the workers of {runner} with these options "
                "may not share this machine's disk: what they write there (receipts of "
                "paid batches) could not be read back. Use a shared filesystem URI such "
                "as gs://bucket/path",
            )


def probe_location(base: str, run_id: str, key: str) -> None:
    """Write, read back and delete ``<base>.probe.<run_id>.<random>`` through Beam's
    FileSystems.

    Catches an unwritable, full or unreachable receipts location (or a filesystem whose
    client is not installed) before anything is sent. The random suffix keeps two
    processes started together on one run id off each other's probe (one deleting it
    while the other reads it back failed the second with a storage error, before the
    lease could say the run is in use).

    Raises:
        ConfigError: naming ``key`` with the storage error.
    """
    from mmirage_beam.io.filesystems import FileSystems
    from mmirage_beam.io.fs import write_durably

    probe = f"{RunLayout(base, run_id).probe}.{uuid.uuid4().hex[:12]}"
    payload = f"mmirage probe {run_id}\n".encode()
    try:
        write_durably(probe, payload)
        with FileSystems.open(probe, compression_type="uncompressed") as f:
            back = f.read()
        FileSystems.delete([probe])
    except Exception as exc:
        raise ConfigError(
            key, f"receipts cannot be written and read back at {base}: {exc}"
        ) from None
    if back != payload:
        raise ConfigError(key, f"receipts written at {base} do not read back identically")


def config_locations(config: Any, **flags: Optional[str]) -> dict[str, str]:
    """Config key (or flag) -> every path of ``config`` the workers read or write, plus the
    given command-line paths (``flags``: flag name without dashes -> path)."""
    locations = {
        "processors[0].metadata_output_path": receipts_base(
            config.processor.metadata_output_path, config.state_dir
        )
    }
    for i, d in enumerate(config.datasets):
        locations[f"loading_params.datasets[{i}].path"] = d.path
        if d.output_dir:
            locations[f"loading_params.datasets[{i}].output_dir"] = d.output_dir
    for name, path in flags.items():
        if path:
            locations["--" + name.replace("_", "-")] = path
    return locations


def translation_only(options: Any) -> bool:
    """Whether the runner only translates the job and runs nothing (Beam's ``--dry_run``
    on the DataflowRunner): nothing is written, so nothing is probed, and no summary of
    work that never happened may be printed."""
    opts = _all_options(options)
    return bool(opts.get("dry_run")) and "dataflow" in _runner_name(opts)


def check_output_file(key: str, path: str, config: Any, other: Sequence[str] = ()) -> None:
    """Refuse an output file that would destroy something: an existing folder (it would be
    replaced by the file), a dataset of the config, or a receipt or run file.

    Args:
        key: the flag, for the message (``--output-path``).
        path: the resolved output path; ``other``: more paths written with it (e.g. the
            errors file).

    Raises:
        ConfigError: naming ``key`` and what would be overwritten.
    """
    import os

    base = receipts_base(config.processor.metadata_output_path, config.state_dir)
    for p in (path, *other):
        if p.endswith("/") or (not is_uri(p) and os.path.isdir(p)):
            raise ConfigError(key, f"{p} is a folder; give a file name such as merged.jsonl")
        for i, d in enumerate(config.datasets):
            if p == d.path or p.startswith(d.path.rstrip("/") + "/"):
                raise ConfigError(
                    key, f"{p} would overwrite loading_params.datasets[{i}].path ({d.path})"
                )
        if p.startswith(base + "."):
            raise ConfigError(
                key,
                f"{p} is where this config's receipts and run files live ({base}.*); "
                "choose another name",
            )


def check_job_endpoint(options: Any, timeout_secs: float = 5.0) -> None:
    """Refuse a ``--job_endpoint`` nothing listens on (the portable runner would wait
    without a word), before anything is read.

    Raises:
        ConfigError: naming ``--job_endpoint``.
    """
    import socket

    endpoint = _all_options(options).get("job_endpoint")
    if not endpoint or endpoint == "embed":
        return
    host, _, port = str(endpoint).rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout_secs):
            return
    except (OSError, ValueError) as exc:
        raise ConfigError(
            "--job_endpoint",
            f"cannot reach the job service at {endpoint} ({exc}); start it first (see "
            "docs/scale.md); nothing was run",
        ) from None
