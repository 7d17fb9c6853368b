"""Real storage servers for the tests, each in its own process on a free loopback port:
moto's S3 server (with storage faults injected by a proxy in front of it) and a GCS
emulator.

    with S3Server(tmp / "s3") as s3:              # moto_server started, bucket created
        env = clean_env(s3.env)                   # AWS credentials, region: never as flags
        run_cli(["run", ..., *s3.flags], ...)     # --s3_endpoint_url ... --s3_region_name ...
        s3.uri("meta/batch_metadata.jsonl")       # s3://<bucket>/meta/batch_metadata.jsonl
        s3.read("out/merged.jsonl")               # the object's bytes, through boto3
        with s3.fault_proxy() as proxy:           # the same server behind a proxy
            proxy.slow_down(5)                    # the next 5 writes answer 503 SlowDown
            proxy.slow_writes(1.5, count=3)       # the next 3 PUTs land 1.5 s late
            run_cli([..., *proxy.flags], ...)

:class:`S3Server` runs ``python -m moto.server`` (``moto_server``) with this interpreter in
its own process group, on a port picked free just before it starts (retried if another
process takes it first), waits until it answers, and creates the bucket. ``stop()`` ends
the whole group (SIGTERM, SIGKILL after a grace period, every wait bounded:
``tests.runners.stop_group``). Moto keeps everything in the server's memory, so each
server starts empty.

The endpoint reaches Beam's S3 filesystem (``apache_beam.io.aws.s3filesystem``) as Beam's
own pipeline options, :attr:`S3Server.flags`; the credentials come from the environment
(:attr:`S3Server.env`: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``), never from
pipeline options. :attr:`S3Server.endpoint_env` is the other way boto3 (and so Beam) finds
the server: ``AWS_ENDPOINT_URL_S3``.

:class:`S3FaultProxy` is ``tests.slow_proxy.SlowProxy`` in front of the server with the
faults S3 shows under load: a burst of ``503 SlowDown`` answers (S3's error XML, as S3
sends it when a prefix is written too fast) on the next writes, and slow writes.

:class:`GCSServer` runs ``python -m gcp_storage_emulator start --in-memory`` (PyPI's
``gcp-storage-emulator``, pure Python) the same way, with its bucket::

    with GCSServer(tmp / "gcs") as gcs:
        env = clean_env(gcs.env)                  # STORAGE_EMULATOR_HOST, offline ADC
        run_cli(["run", ...], ...)                # no flag: the endpoint is in the env
        gcs.uri("out/merged.jsonl")               # gs://<bucket>/out/merged.jsonl
        gcs.read("out/merged.jsonl")              # through google-cloud-storage
        with gcs.fault_proxy() as proxy:          # the same server behind a proxy
            proxy.refuse(5)                       # the next 5 object reads: 403 Forbidden
            run_cli([...], ..., clean_env(proxy.env))

Beam's GCS filesystem (``apache_beam.io.gcp.gcsio``) builds a ``google.cloud.storage``
client, which talks to ``$STORAGE_EMULATOR_HOST`` when it is set; Beam has no pipeline
option for the endpoint. Beam first asks for Google's application default credentials
and retries any failure with backoff (``apache_beam/internal/gcp/auth.py``: five tries,
about 30 s, once per process) before it connects anonymously. :attr:`GCSServer.env`
avoids that wait: ``GOOGLE_APPLICATION_CREDENTIALS`` names an ``authorized_user`` file
(:data:`OFFLINE_ADC`) holding a fake access token that expires in 2999, so
``google.auth.default()`` succeeds without any network call and the token is never
refreshed; the emulator ignores it. Without that file each process that touches
``gs://`` waits those 30 s. (The Go ``fake-gcs-server`` is not used: it answers Beam's
batch requests, a batch rename or delete, with "Bad response: not multi-part".)
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Optional, TypeVar

from tests.runners import REQUIRE_ENV_VAR, ServiceStartError, _become_subreaper, stop_group
from tests.slow_proxy import Methods, SlowProxy

REGION = "us-east-1"
#: Test credentials: moto accepts any. Only ever in the environment.
ACCESS_KEY_ID = "mmirage-test-access-key"
SECRET_ACCESS_KEY = "mmirage-test-secret-key"
#: The requests that write: object uploads and copies (PUT), multipart create and
#: complete and batch deletes (POST).
WRITES: tuple[str, ...] = ("PUT", "POST")
#: S3's answer to a client that writes too fast (HTTP 503), as S3 sends it.
SLOW_DOWN_XML = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
    b"<RequestId>MMIRAGETEST</RequestId><HostId>mmirage-fault-proxy</HostId></Error>"
)
#: GCS's answer to credentials that may not use the bucket (HTTP 403).
FORBIDDEN_JSON = json.dumps(
    {
        "error": {
            "code": 403,
            "message": "mmirage-test does not have storage.objects.get access",
            "errors": [{"reason": "forbidden", "domain": "global"}],
        }
    }
).encode()
#: The project the GCS clients name (the emulator reports its own number for any).
GCS_PROJECT = "mmirage-test"
#: Application default credentials that work offline: ``authorized_user`` (the fields
#: google-auth's ``Credentials.to_json()`` writes and ``from_authorized_user_info`` reads)
#: with an access token valid until 2999, so it is never refreshed (a refresh would call
#: oauth2.googleapis.com). Only for an emulator, which ignores the token.
OFFLINE_ADC = {
    "type": "authorized_user",
    "client_id": "mmirage-test-client",
    "client_secret": "mmirage-test-secret",
    "refresh_token": "mmirage-test-refresh-token",
    "token": "mmirage-test-access-token",
    "expiry": "2999-01-01T00:00:00Z",
}

_Server = TypeVar("_Server", bound="_ServerProcess")


def moto_available() -> Optional[str]:
    """None when moto's server and boto3 can be imported, else why not."""
    try:
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError as exc:
        return f"moto[server] and boto3 are needed for the S3 tests: {exc}"
    return None


def gcs_emulator_available() -> Optional[str]:
    """None when the GCS emulator, google-cloud-storage and Beam's GCS filesystem can be
    imported, else why not."""
    try:
        import apache_beam.io.gcp.gcsfilesystem  # noqa: F401
        import gcp_storage_emulator  # noqa: F401
        import google.cloud.storage  # noqa: F401
    except ImportError as exc:
        return f"gcp-storage-emulator and apache-beam[gcp] are needed for the GCS tests: {exc}"
    return None


def _skip_unless(why: Optional[str]) -> None:
    """Skip the calling test when ``why`` says what is missing; fail instead when
    ``$MMIRAGE_REQUIRE_PORTABLE=1`` (CI), where every storage test must run."""
    import pytest

    if why is None:
        return
    if os.environ.get(REQUIRE_ENV_VAR) == "1":
        pytest.fail(f"{why} (${REQUIRE_ENV_VAR}=1: not skipped)")
    pytest.skip(why)


def skip_unless_moto() -> None:
    """Skip the calling test when moto cannot be imported; fail instead when
    ``$MMIRAGE_REQUIRE_PORTABLE=1`` (CI), where every storage test must run."""
    _skip_unless(moto_available())


def skip_unless_gcs_emulator() -> None:
    """Skip the calling test when the GCS emulator (or Beam's GCS filesystem) cannot be
    imported; fail instead when ``$MMIRAGE_REQUIRE_PORTABLE=1`` (CI)."""
    _skip_unless(gcs_emulator_available())


def s3_flags(endpoint: str) -> list[str]:
    """Beam's pipeline options that point its S3 filesystem at ``endpoint``."""
    return ["--s3_endpoint_url", endpoint, "--s3_region_name", REGION]


class _ServerProcess:
    """A storage server: ``python -m <module> ...`` in its own process group on a free
    loopback port, with one bucket. Subclasses give the command, the log's name and the
    environment, and create the bucket once the server answers.

    Args:
        workdir: the server's working directory and log; created.
        bucket: the bucket to create (default: a fresh name).
        timeout: seconds to wait for the server to answer.
    """

    #: what the start error calls the server, and its log file in ``workdir``.
    NAME = ""
    LOG = ""

    def __init__(self, workdir: Path, bucket: Optional[str] = None, timeout: float = 60.0):
        self.workdir = Path(workdir)
        self.bucket = bucket or f"mmirage-{uuid.uuid4().hex[:12]}"
        self.timeout = timeout
        self.proc: Optional[subprocess.Popen] = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        raise NotImplementedError

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _create_bucket(self) -> None:
        """Once the server answers (nothing to do when the command creates it)."""

    def __enter__(self: _Server) -> _Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the server, wait until it answers, create the bucket.

        Raises:
            ServiceStartError: it exited or did not answer within ``timeout`` (with the
                tail of its log); it is stopped first.
        """
        if self.proc is not None:
            return
        _become_subreaper()
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / self.LOG
        try:
            for attempt in range(3):
                self.port = _free_port()
                with open(log, "ab") as out:
                    self.proc = subprocess.Popen(
                        [sys.executable, "-m", *self._command()],
                        cwd=self.workdir,
                        env={**os.environ, **self.env, "PYTHONUNBUFFERED": "1"},
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                if self._wait_until_up():
                    break
                if attempt == 2 or self.proc.poll() is None:
                    raise ServiceStartError(
                        f"{self.NAME} did not answer on {self.endpoint} within "
                        f"{self.timeout}s:\n{_tail(log)}"
                    )
                self.proc = None  # the port was taken: another try on another port
            self._create_bucket()
        except BaseException:
            self.stop()
            raise

    def _wait_until_up(self) -> bool:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            try:  # straight to the port: no proxy of the environment in between
                conn.request("GET", "/")
                conn.getresponse().read()
                return True  # it answered (any status)
            except OSError:
                time.sleep(0.1)
            finally:
                conn.close()
        return False

    def stop(self) -> list[str]:
        """Stop the server's process group (idempotent); what could not be reaped."""
        proc, self.proc = self.proc, None
        return stop_group(proc, grace=5.0) if proc is not None else []


class S3Server(_ServerProcess):
    """moto's S3 server in its own process group, with one bucket (log: ``moto.log``)."""

    NAME = "moto's S3 server"
    LOG = "moto.log"

    # -- what a test hands to mmirage -----------------------------------------------------

    @property
    def flags(self) -> list[str]:
        """``--s3_endpoint_url ENDPOINT --s3_region_name us-east-1``."""
        return s3_flags(self.endpoint)

    @property
    def env(self) -> dict[str, str]:
        """The credentials (and region) boto3 reads from the environment; no endpoint."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "AWS_DEFAULT_REGION": REGION,
            # no ~/.aws files of the machine
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    @property
    def endpoint_env(self) -> dict[str, str]:
        """:attr:`env` plus ``AWS_ENDPOINT_URL_S3``: the server found without any flag."""
        return {**self.env, "AWS_ENDPOINT_URL_S3": self.endpoint}

    def uri(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{key}"

    # -- reading the bucket back (boto3, not Beam) ------------------------------------------

    def client(self, endpoint: Optional[str] = None):  # noqa: ANN201
        import boto3

        return boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint or self.endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
        )

    def read(self, key: str) -> bytes:
        """The bytes of object ``key`` (a key, or an ``s3://bucket/key`` URI)."""
        key = key.removeprefix(self.uri())
        return self.client().get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def keys(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix``, sorted."""
        prefix = prefix.removeprefix(self.uri())
        pages = self.client().get_paginator("list_objects_v2")
        return sorted(
            o["Key"]
            for page in pages.paginate(Bucket=self.bucket, Prefix=prefix)
            for o in page.get("Contents", [])
        )

    # -- life cycle ---------------------------------------------------------------------------

    def _command(self) -> list[str]:
        return ["moto.server", "-H", "127.0.0.1", "-p", str(self.port)]

    def _create_bucket(self) -> None:
        self.client().create_bucket(Bucket=self.bucket)

    def fault_proxy(self) -> S3FaultProxy:
        """A proxy in front of this server (start it with ``with``)."""
        return S3FaultProxy(self)


class GCSServer(_ServerProcess):
    """The GCS emulator (``gcp-storage-emulator``) in its own process group, in memory,
    with one bucket (log: ``gcs.log``; the offline credentials: ``adc.json``)."""

    NAME = "the GCS emulator"
    LOG = "gcs.log"

    # -- what a test hands to mmirage -----------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """The endpoint (``STORAGE_EMULATOR_HOST``, which google-cloud-storage and so
        Beam's GCS filesystem honour), the offline credentials file and a project."""
        return {
            "STORAGE_EMULATOR_HOST": self.endpoint,
            "GOOGLE_APPLICATION_CREDENTIALS": str(self.credentials_file),
            "GOOGLE_CLOUD_PROJECT": GCS_PROJECT,
        }

    @property
    def credentials_file(self) -> Path:
        """``authorized_user`` credentials with a fake token valid until 2999: Beam's
        ``google.auth.default()`` succeeds at once, offline, and never refreshes it."""
        return self.workdir / "adc.json"

    def uri(self, key: str = "") -> str:
        return f"gs://{self.bucket}/{key}"

    # -- reading the bucket back (google-cloud-storage, not Beam) -----------------------------

    def client(self):  # noqa: ANN201
        """A ``google.cloud.storage`` client of the emulator, anonymous, from any
        environment (the endpoint is given, not read from ``STORAGE_EMULATOR_HOST``)."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project=GCS_PROJECT,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.endpoint},
        )

    def read(self, key: str) -> bytes:
        """The bytes of object ``key`` (a key, or a ``gs://bucket/key`` URI)."""
        key = key.removeprefix(self.uri())
        return self.client().bucket(self.bucket).blob(key).download_as_bytes()

    def keys(self, prefix: str = "") -> list[str]:
        """Every object name under ``prefix``, sorted."""
        prefix = prefix.removeprefix(self.uri())
        return sorted(b.name for b in self.client().list_blobs(self.bucket, prefix=prefix))

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Write the offline credentials file, then start as every server does."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.credentials_file.write_text(json.dumps(OFFLINE_ADC), encoding="utf-8")
        super().start()

    def _command(self) -> list[str]:
        return [
            "gcp_storage_emulator", "start", "--host", "127.0.0.1", "--port", str(self.port),
            "--in-memory", "--default-bucket", self.bucket,
        ]  # fmt: skip

    def fault_proxy(self) -> GCSFaultProxy:
        """A proxy in front of this server (start it with ``with``)."""
        return GCSFaultProxy(self)


class S3FaultProxy(SlowProxy):
    """``tests.slow_proxy.SlowProxy`` in front of an :class:`S3Server`, with S3's faults.

    Point mmirage at :attr:`flags` (or :attr:`endpoint`) instead of the server's.
    """

    def __init__(self, server: S3Server) -> None:
        super().__init__(server.endpoint)
        self.server = server

    @property
    def endpoint(self) -> str:
        return self.base_url

    @property
    def flags(self) -> list[str]:
        return s3_flags(self.endpoint)

    def slow_down(
        self,
        count: int,
        methods: Methods = WRITES,
        path: str = "*",
        armed_by: Optional[tuple[Methods, str]] = None,
    ) -> None:
        """The next ``count`` writes (``methods`` to keys matching ``path``; with
        ``armed_by``, only after a call matching it was answered) get S3's ``503
        SlowDown`` instead of reaching the server."""
        self.fail(
            methods,
            path,
            count,
            503,
            SLOW_DOWN_XML,
            {"Content-Type": "application/xml", "x-amz-request-id": "MMIRAGETEST"},
            armed_by=armed_by,
        )

    def slow_writes(self, delay_secs: float, count: int, path: str = "*") -> None:
        """The next ``count`` PUTs (uploads, parts, copies) to keys matching ``path``
        reach the server ``delay_secs`` late."""
        self.delay("PUT", path, delay_secs, count, before=True)


class GCSFaultProxy(SlowProxy):
    """``tests.slow_proxy.SlowProxy`` in front of a :class:`GCSServer`, answering with
    GCS's JSON errors. Point mmirage at :attr:`env` instead of the server's."""

    def __init__(self, server: GCSServer) -> None:
        super().__init__(server.endpoint)
        self.server = server

    @property
    def env(self) -> dict[str, str]:
        return {**self.server.env, "STORAGE_EMULATOR_HOST": self.base_url}

    def refuse(
        self, count: int, methods: Methods = "GET", path: str = "/storage/v1/b/*/o/*"
    ) -> None:
        """The next ``count`` calls (``methods`` to paths matching ``path``; by default
        reads of an object's metadata) get GCS's ``403 Forbidden``, as a bucket the
        credentials may not use answers (google-cloud-storage does not retry it)."""
        self.fail(methods, path, count, 403, FORBIDDEN_JSON, {"Content-Type": "application/json"})


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(log: Path, n: int = 3000) -> str:
    return log.read_text(encoding="utf-8", errors="replace")[-n:] if log.exists() else ""
