"""``mmirage fake-provider`` / ``python -m mmirage_beam.testing.fake_provider``: serve the
fake on a port until Ctrl-C or SIGTERM, with failures scripted from flags."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import threading
from typing import Any

from mmirage_beam.testing.fake_provider.app import FakeProviderServer
from mmirage_beam.testing.fake_provider.scripting import SCRIPT_KEYS, markers_help

__all__ = ["main"]


def _labels() -> list[str]:
    """The labels of the registered fakes (each provider's fake names its own)."""
    from mmirage_beam.testing.fake_registry import registered_fakes

    out: list[str] = []
    for name, cls in registered_fakes().items():
        labels = getattr(cls, "labels", ())
        if isinstance(labels, tuple) and labels:
            out.extend(label for label, _ in labels)
        else:
            out.append(name)
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mmirage fake-provider",
        description="A fake of the batch APIs of the providers ("
        + ", ".join(_labels())
        + "), in memory on one loopback port, for tests and rehearsals (nothing reaches a "
        "real provider).\n"
        "Point the SDKs or a config's base_url at it: the start-up line gives each "
        "provider's base URL. Any non-empty key is accepted. Script failures at start with "
        "the flags below, or later with POST /_fake/script (same keys as --script); GET "
        "/_fake/state shows what it holds.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Markers in a prompt script single requests (see the package docstring of "
        "mmirage_beam.testing.fake_provider for each provider's exact shape):\n"
        + markers_help()
        + "\n  FAKE_FENCE                  the JSON answer comes in a ```json fence"
        + "\n\nScript keys (--script JSON or POST /_fake/script): "
        + ", ".join(SCRIPT_KEYS)
        + ".\nleading_errors accepts any 4xx/5xx status; 404 answers the provider's "
        'not-found error, e.g. {"status": 404, "count": 2, "paths": '
        '["batches_retrieve"]}.',
    )
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind")
    parser.add_argument("--port", type=int, default=0, help="TCP port (0: a free port)")
    parser.add_argument(
        "--delay", type=float, default=0.0, help="seconds each batch takes to complete"
    )
    parser.add_argument(
        "--script",
        default=None,
        help="JSON object of scripting keys, e.g. '{\"shuffle_results\": true}'",
    )
    parser.add_argument(
        "--expire-after-requests",
        type=int,
        default=None,
        metavar="N",
        help="batches expire after N requests (partial results)",
    )
    parser.add_argument(
        "--cancel-after-requests",
        type=int,
        default=None,
        metavar="N",
        help="batches are cancelled after N requests (partial results)",
    )
    parser.add_argument(
        "--token-limit-exceeded",
        action="store_true",
        help="batches whose service checks a token limit at validation fail with "
        "token_limit_exceeded",
    )
    parser.add_argument(
        "--empty-error-file-id",
        action="store_true",
        help='error_file_id is "" when nothing failed (services with an error file)',
    )
    parser.add_argument(
        "--shuffle-results", action="store_true", help="results in a shuffled order"
    )
    parser.add_argument(
        "--unknown-custom-id",
        action="store_true",
        help="add a result whose custom_id was never submitted",
    )
    parser.add_argument(
        "--leading-errors",
        default=None,
        metavar="JSON",
        help='first calls fail, e.g. \'{"status": 429, "count": 3, "retry_after_ms": 10}\' '
        'or \'{"status": 404, "count": 2, "paths": ["batches_retrieve"]}\'',
    )
    parser.add_argument(
        "--fail-batch-creates",
        default=None,
        metavar="JSON",
        help='fail batch creations, e.g. \'{"nth": 2, "permanent": true}\'',
    )
    parser.add_argument(
        "--models",
        default="",
        metavar="A,B",
        help="comma-separated model names served beside the SDK-listed ones (any other "
        "name is refused as the service refuses it: docs/fake-provider.md)",
    )
    parser.add_argument(
        "--with",
        dest="with_fakes",
        action="append",
        default=[],
        metavar="NAME",
        help="also start what the registered fake NAME's demo needs beside this server "
        "(a fake that is a server of its own, on an emulator; a storage server...) and "
        "print its processor keys (repeatable; docs/fake-provider.md)",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="log every request (DEBUG) to stderr"
    )
    return parser


def _script_from_args(args: argparse.Namespace) -> dict[str, Any]:
    script: dict[str, Any] = {}
    if args.script:
        loaded = json.loads(args.script)
        if not isinstance(loaded, dict):
            raise ValueError("--script must be a JSON object")
        script.update(loaded)
    for key in ("expire_after_requests", "cancel_after_requests"):
        if getattr(args, key) is not None:
            script[key] = getattr(args, key)
    for key in ("token_limit_exceeded", "empty_error_file_id", "shuffle_results"):
        if getattr(args, key):
            script[key] = True
    if args.unknown_custom_id:
        script["unknown_custom_id"] = True
    if args.leading_errors:
        script["leading_errors"] = json.loads(args.leading_errors)
    if args.fail_batch_creates:
        script["fail_batch_creates"] = json.loads(args.fail_batch_creates)
    return script


def _demo_of(fake: FakeProviderServer, name: str) -> Any:
    """The ``demo`` context manager of the registered fake ``name``.

    Raises:
        ValueError: no registered fake has that name, or it has no ``demo``.
    """
    try:
        demo = getattr(fake.registered_fake(name), "demo", None)
    except KeyError:
        demo = None
    if demo is None:
        known = [n for n in fake.registered_names if hasattr(fake.registered_fake(n), "demo")]
        raise ValueError(f"--with {name}: no registered fake of that name has a demo; {known}")
    return demo


def main(argv: list[str] | None = None) -> int:
    """Runs the fake until Ctrl-C or SIGTERM; returns the process exit code.

    Prints one banner line ``fake provider listening on http://HOST:PORT (<label>:
    <base URL>, ...)`` once the port is bound, with the labels of the registered fakes in
    their rank order (``OpenAI: http://HOST:PORT/v1, Anthropic: http://HOST:PORT, ...``),
    then an ``and <name>: URL`` line for each fake without a label.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.WARNING,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    try:
        models = [m.strip() for m in args.models.split(",") if m.strip()]
        fake = FakeProviderServer(
            host=args.host, port=args.port, processing_delay_secs=args.delay, models=models
        )
        fake.script(**_script_from_args(args))
        demos = [_demo_of(fake, name) for name in args.with_fakes]
    except ValueError as exc:  # includes json.JSONDecodeError
        parser.error(str(exc))
    stop = threading.Event()
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        # Handle both explicitly: a shell starts background jobs with SIGINT ignored.
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
    fake.start()
    extras = contextlib.ExitStack()
    try:
        named = ", ".join(f"{label}: {fake.base_url_for(p)}" for label, p in fake.labels())
        print(f"fake provider listening on {fake.base_url} ({named})", flush=True)
        for name in fake.registered_names:  # fakes without a label: a line of their own
            if not fake.labels(name) and not getattr(
                fake.registered_fake(name), "own_server", False
            ):
                print(f"  and {name}: {fake.base_url_for(name)}", flush=True)
        for name, demo in zip(args.with_fakes, demos):
            try:  # the fake's own services (an emulator, a server of its own...)
                keys = dict(extras.enter_context(demo(fake.base_url_for(name), 100)))
            except Exception as exc:  # noqa: BLE001 - e.g. an emulator not installed
                parser.error(f"--with {name}: {exc}")
            print(f"  with {name}: {json.dumps(keys, sort_keys=True)}", flush=True)
        while not stop.wait(0.2):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        extras.close()
        fake.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0
