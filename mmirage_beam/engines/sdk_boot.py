"""The SDK worker boot for ``--environment_type PROCESS`` on engines started here.

A runner with a PROCESS environment starts its SDK workers itself, as
``<command> --id=W --provision_endpoint=H:P --logging_endpoint=... --control_endpoint=...
--artifact_endpoint=...``. In Beam's SDK containers that command is Beam's Go boot
program (``sdks/python/container/boot.go``); on the TaskManagers of a cluster started by
``mmirage cluster up`` it is this module, run by the cluster's own Python (the venv that
has mmirage-beam and Beam installed), so nothing is installed per job.

It does what Beam's boot does before it hands over to the Python SDK harness: asks the
runner's provision service for the job's pipeline options (and the endpoints, which
override the flags when given), sets the environment variables
``apache_beam.runners.worker.sdk_worker_main`` reads (``WORKER_ID``,
``PIPELINE_OPTIONS``, ``CONTROL_API_SERVICE_DESCRIPTOR``,
``LOGGING_API_SERVICE_DESCRIPTOR``, ``STATUS_API_SERVICE_DESCRIPTOR``,
``RUNNER_CAPABILITIES``, ``SEMI_PERSISTENT_DIRECTORY``) and replaces itself with
``python -m apache_beam.runners.worker.sdk_worker_main``. What Beam's boot also does
and this one does not: installing staged artifacts (``--setup_file``,
``--requirements_file``): the workers use the packages installed next to this module.

The worker inherits the environment and working directory of whatever started it (the
TaskManager): that is how each TaskManager's workers get their own provider keys.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional, Sequence


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="mmirage-sdk-boot")
    p.add_argument("--id", required=True)
    p.add_argument("--provision_endpoint", required=True)
    p.add_argument("--logging_endpoint", default="")
    p.add_argument("--artifact_endpoint", default="")
    p.add_argument("--control_endpoint", default="")
    p.add_argument("--semi_persistent_directory", default="")
    args, _ = p.parse_known_args(list(argv))
    # Prism quotes the id for a shell that is never run (--id='job-001[job]_...'):
    # the quotes are not part of the id it registered.
    if len(args.id) >= 2 and args.id[0] == args.id[-1] == "'":
        args.id = args.id[1:-1]
    return args


def worker_environment(argv: Sequence[str], timeout: float = 60.0) -> dict[str, str]:
    """The environment variables of the SDK harness for the runner's boot flags ``argv``.

    Raises:
        grpc.RpcError: the provision service did not answer within ``timeout`` seconds.
    """
    import grpc
    from apache_beam.portability.api import (
        beam_provision_api_pb2,
        beam_provision_api_pb2_grpc,
        endpoints_pb2,
    )
    from google.protobuf import json_format

    args = _parse(argv)
    with grpc.insecure_channel(args.provision_endpoint) as channel:
        grpc.channel_ready_future(channel).result(timeout=timeout)
        stub = beam_provision_api_pb2_grpc.ProvisionServiceStub(channel)
        info = stub.GetProvisionInfo(
            beam_provision_api_pb2.GetProvisionInfoRequest(),
            metadata=[("worker_id", args.id)],
            timeout=timeout,
        ).info

    def descriptor(url: str) -> str:
        return str(endpoints_pb2.ApiServiceDescriptor(url=url))

    control = info.control_endpoint.url or args.control_endpoint
    logging_url = info.logging_endpoint.url or args.logging_endpoint
    env = {
        "WORKER_ID": args.id,
        "PIPELINE_OPTIONS": json.dumps(json_format.MessageToDict(info.pipeline_options)),
        "CONTROL_API_SERVICE_DESCRIPTOR": descriptor(control),
        "RUNNER_CAPABILITIES": " ".join(info.runner_capabilities),
    }
    if logging_url:
        env["LOGGING_API_SERVICE_DESCRIPTOR"] = descriptor(logging_url)
    if info.status_endpoint.url:
        env["STATUS_API_SERVICE_DESCRIPTOR"] = descriptor(info.status_endpoint.url)
    if args.semi_persistent_directory:
        env["SEMI_PERSISTENT_DIRECTORY"] = args.semi_persistent_directory
    return env


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Boot one SDK worker: provision, then exec the Python SDK harness (never returns
    on success)."""
    env = {**os.environ, **worker_environment(sys.argv[1:] if argv is None else argv)}
    cmd = [sys.executable, "-m", "apache_beam.runners.worker.sdk_worker_main"]
    os.execve(sys.executable, cmd, env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
