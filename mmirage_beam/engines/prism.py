"""Beam's Prism runner as a local job service that outlives one command.

``mmirage cluster up --engine prism`` starts the Prism binary (built by
:func:`mmirage_beam.engines.provision.prism_binary`) as a daemon on a free loopback
port, so ``mmirage run`` and ``mmirage merge`` submit to the same service (and its web
UI could be turned on); the SDK workers are started by Prism for each job with Beam's
PROCESS environment and :mod:`mmirage_beam.engines.sdk_boot`, in the folder
``D/prism/``. For a single command, ``--runner PrismRunner --prism_location BIN`` lets
Beam start and stop Prism itself.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Mapping, Optional

from mmirage_beam.engines import provision, versions
from mmirage_beam.engines.cluster import (
    ClusterState,
    boot_script,
    check_cluster_dir,
    portable_flags,
    stop_cluster,
)
from mmirage_beam.engines.processes import accepts, free_port, start_daemon, wait_until


def start_prism(
    cluster_dir: Path,
    env: Optional[Mapping[str, str]] = None,
    timeout: float = 120.0,
    say=lambda _line: None,  # noqa: ANN001
) -> ClusterState:
    """Start Prism's job service in ``cluster_dir`` and wait until it accepts connections
    (building Prism first if it is not cached).

    Returns:
        The saved :class:`ClusterState`; its ``flags`` submit to Prism.

    Raises:
        EngineError: Prism could not be built or started (its log tail is in the
            message), or a cluster already runs in ``cluster_dir``.
    """
    cluster_dir = check_cluster_dir(cluster_dir)
    binary = provision.prism_binary(say=say)
    port = free_port()
    boot = boot_script(cluster_dir)
    state = ClusterState(
        engine="prism",
        dir=str(cluster_dir),
        versions={"prism": versions.beam_sdk_version(), "beam_sdk": versions.beam_sdk_version()},
        ports={"job": port},
        flags=portable_flags(port, boot),
    )
    say(f"starting Prism (localhost:{port})")
    daemon = start_daemon(
        "prism",
        [str(binary), "--job_port", str(port), "--serve_http=false", "--log_kind", "text"],
        cluster_dir / "prism",
        cluster_dir / "logs" / "prism.log",
        dict(os.environ if env is None else env),
    )
    state.daemons.append(daemon)
    state.save()
    try:
        wait_until(
            "Prism to accept connections",
            lambda: True if accepts(port) else None,
            time.monotonic() + timeout,
            [daemon],
        )
    except BaseException:
        stop_cluster(cluster_dir, state=state)
        raise
    return state
