"""The fake Amazon Bedrock batch inference control plane, served by the fake provider
(:class:`~mmirage_beam.testing.FakeProviderServer`) for boto3's ``bedrock`` client
(``boto3.client("bedrock", endpoint_url=fake.base_url)``), with S3 on a real S3 server
(moto's, in the tests) that it reads and writes through boto3.

Routes (restJson, botocore's ``bedrock`` service model 2023-04-20):

- ``POST /model-invocation-job`` (CreateModelInvocationJob), ``GET
  /model-invocation-job/{jobIdentifier}`` (Get), ``GET /model-invocation-jobs``
  (List: ``nameContains``, ``statusEquals``, ``submitTimeAfter``, ``submitTimeBefore``,
  ``sortOrder``, ``maxResults``, ``nextToken``), ``POST
  /model-invocation-job/{jobIdentifier}/stop`` (Stop).
- Every request is checked against the operation's input shape with botocore's own
  ``ParamValidator`` plus the model's ``pattern`` / ``enum`` traits (which the validator
  leaves out); a refusal is a 400 ``ValidationException``. Every answer is checked against
  the output shape the same way before it is sent (a failure is a bug in the fake: 500).
- Requests must be SigV4-signed (``Authorization: AWS4-HMAC-SHA256 ...``; the region of
  the job ARN is the signature's), else 403 ``AccessDeniedException``. Errors are
  ``{"message"}`` with ``x-amzn-ErrorType: <Code>``, as botocore's rest-json parser reads.

Idempotency: ``clientRequestToken`` "ensures that the API request completes no more than
one time. If this token matches a previous request, Amazon Bedrock ignores the request,
but does not return an error" (the model's documentation of the member): the same token
with the same parameters answers the first job's ARN and makes no job. The same token
with *different* parameters is refused with 409 ``ConflictException`` (AWS's general
idempotency rule, "Ensuring idempotency", EC2 API reference; Bedrock documents no other
answer: this is our reading).

Lifecycle (``d`` the processing delay): ``Submitted`` at creation, ``Validating`` from
``d/6``, ``Scheduled`` from ``d/4``, ``InProgress`` from ``d/3``, then at ``d``
``Completed`` (every record answered) or ``PartiallyCompleted`` (some error lines). A job
whose input cannot be read, has fewer records than :attr:`BedrockFake.min_records` (100,
Bedrock's default quota) or more than 50,000 ends ``Failed`` at ``d/3`` with a
``message``. ``expire_after_requests`` ends it ``Expired``, ``cancel_after_requests`` and
Stop go through ``Stopping`` to ``Stopped``, each with the processed records' output.
When a job ends, ``<output s3Uri>/<jobId>/<input file name>.out`` and
``manifest.json.out`` are written to S3.

Records: ``{"recordId", "modelInput"}``; ``modelInput`` is checked as the model family's
body (Anthropic Messages: ``anthropic_version: bedrock-2023-05-31``, ``max_tokens``,
``messages``; Meta Llama: ``prompt``, ``max_gen_len`` <= 2048), a bad one is an error
line (400). The answers are :func:`~mmirage_beam.testing.fake_provider.answers.make_answer`'s,
and the ``FAKE_ERROR:...`` markers act as for the other fakes: ``server_error`` (500),
``invalid_request`` (400), ``rate_limit`` (429), ``timeout`` (408), ``transient``,
``flaky``, ``u2028`` error lines ``{"error": {"errorCode", "errorMessage"}}``;
``refusal`` (Claude ``stop_reason: refusal``; Llama answers), ``length`` (``max_tokens``
/ ``length``), ``empty``, ``not_json``, ``error_body_200`` (a ``modelOutput`` that is an
error object), ``empty_body_200`` (``modelOutput: {}``) and the line markers.
Script keys honoured: ``processing_delay_secs``, ``expire_after_requests``,
``cancel_after_requests``, ``leading_errors`` (names :data:`ENDPOINT_NAMES`),
``fail_batch_creates``, ``shuffle_results``, ``unknown_custom_id``.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import json
import logging
import re
import secrets
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from mmirage_beam.providers.bedrock import FAKE_ENDPOINT_NAMES
from mmirage_beam.testing.fake_provider import lifecycle, scripting
from mmirage_beam.testing.fake_provider.answers import count_parts, make_answer, text_parts
from mmirage_beam.testing.fake_provider.scripting import UNKNOWN_CUSTOM_ID, error_marker
from mmirage_beam.testing.fake_provider.store import (
    Batch,
    Item,
    Store,
    answered_response_item,
    jsonl,
)

_LOG = logging.getLogger("mmirage_beam.testing.fake_provider.bedrock")
BEDROCK = "bedrock"
ACCOUNT = "123456789012"
ENDPOINT_NAMES = FAKE_ENDPOINT_NAMES
#: Bedrock's default quotas (docs.aws.amazon.com/general/latest/gr/bedrock.html).
MIN_RECORDS = 100
MAX_RECORDS = 50_000
MAX_LLAMA_GEN_LEN = 2048
TERMINAL = ("Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired")
#: marker -> (errorCode, errorMessage) of a failed record's line.
FAILURES = {
    "server_error": (500, "Internal server error (FAKE_ERROR:server_error)."),
    "invalid_request": (400, "Scripted invalid request (FAKE_ERROR:invalid_request)."),
    "rate_limit": (429, "Too many requests (FAKE_ERROR:rate_limit)."),
    "timeout": (408, "The model timed out (FAKE_ERROR:timeout)."),
    "u2028": (400, scripting.U2028_MESSAGE),
}
_LLAMA_USER = re.compile(r"<\|start_header_id\|>user<\|end_header_id\|>\n\n(.*?)<\|eot_id\|>", re.S)
_LLAMA_JSON = "Reply with only a JSON object (no other text) that matches this JSON schema:"


class BedrockError(Exception):
    """An AWS error answer: HTTP ``status``, ``code`` (``x-amzn-ErrorType``), ``message``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _validation(message: str) -> BedrockError:
    return BedrockError(400, "ValidationException", message)


def _service_model() -> Any:
    import botocore.session

    return botocore.session.get_session().get_service_model(BEDROCK)


def check_shape(value: Any, shape: Any, where: str = "") -> list[str]:
    """Problems of ``value`` against a botocore ``shape``: botocore's ``ParamValidator``
    (types, required members, ranges, lengths) plus the ``pattern`` and ``enum`` traits
    it does not check. Empty: valid."""
    from botocore.validate import ParamValidator

    report = ParamValidator().validate(value, shape)
    problems = [report.generate_report()] if report.has_errors() else []
    _patterns(value, shape, where or shape.name, problems)
    return problems


def known_members(value: Any, shape: Any) -> Any:
    """``value`` without the structure members ``shape`` (a botocore shape) does not
    define, at every depth: what botocore's parser keeps of a response."""
    kind = shape.type_name
    if kind == "structure" and isinstance(value, dict):
        return {
            name: known_members(item, shape.members[name])
            for name, item in value.items()
            if name in shape.members
        }
    if kind == "list" and isinstance(value, list):
        return [known_members(item, shape.member) for item in value]
    if kind == "map" and isinstance(value, dict):
        return {key: known_members(item, shape.value) for key, item in value.items()}
    return value


def _patterns(value: Any, shape: Any, where: str, problems: list[str]) -> None:
    kind = shape.type_name
    if kind == "structure" and isinstance(value, dict):
        for name, member in shape.members.items():
            if name in value and value[name] is not None:
                _patterns(value[name], member, f"{where}.{name}", problems)
    elif kind == "list" and isinstance(value, list):
        for i, item in enumerate(value):
            _patterns(item, shape.member, f"{where}[{i}]", problems)
    elif kind == "string" and isinstance(value, str):
        pattern = shape.metadata.get("pattern")
        if pattern and not re.fullmatch(pattern, value):
            problems.append(f"{where}: {value!r} does not match the pattern {pattern}")
        enum = shape.enum
        if enum and value not in enum:
            problems.append(f"{where}: {value!r} is not one of {enum}")


@dataclass
class _Job:
    """One job: its lifecycle and records (``batch``), ARN, create parameters without
    the token, the token, and a ``message`` once validation failed."""

    batch: Batch
    arn: str
    params: dict[str, Any]
    token: Optional[str] = None
    message: Optional[str] = None


class BedrockFake:
    """Bedrock's batch inference control plane over the fake's shared :class:`Store`.

    Attributes:
        min_records: the fewest records a job may hold (default 100, Bedrock's quota);
            tests lower it.
        s3_endpoint_url: where the fake reads inputs and writes outputs (None: boto3's
            own, e.g. ``AWS_ENDPOINT_URL_S3``).
    """

    PREFIXES = ("/model-invocation-job",)

    def __init__(self, store: Store) -> None:
        self.store = store
        self.min_records = MIN_RECORDS
        self.s3_endpoint_url: Optional[str] = None
        self._model = _service_model()
        self._url_map = Map(
            [
                Rule("/model-invocation-job", methods=["POST"], endpoint="create_job"),
                Rule("/model-invocation-jobs", methods=["GET"], endpoint="list_jobs"),
                Rule(
                    "/model-invocation-job/<path:ident>/stop", methods=["POST"], endpoint="stop_job"
                ),
                Rule("/model-invocation-job/<path:ident>", methods=["GET"], endpoint="get_job"),
            ],
            strict_slashes=False,
        )

    # -- the registry's contract ------------------------------------------------------
    @contextlib.contextmanager
    def demo(self, base_url: str, rows: int) -> Iterator[dict[str, Any]]:
        """What ``mmirage demo --provider bedrock`` needs besides the fake: moto's S3
        server in this process (a thread on a free loopback port, with a bucket), test
        credentials and ``AWS_ENDPOINT_URL_S3`` in the environment; yields the processor
        keys of the demo's config.

        Raises:
            RuntimeError: moto is not installed (naming ``pip install 'moto[server]'``).
        """
        try:
            from moto.server import DomainDispatcherApplication, create_backend_app
        except ImportError:
            raise RuntimeError(
                "mmirage demo --provider bedrock runs S3 in-process with moto: "
                "pip install 'moto[server]'"
            ) from None
        import os

        from mmirage_beam.testing.fake_provider.serving import (
            QuietRequestHandler,
            serve_in_thread,
            stop_serving,
        )

        # moto's S3 app on our quiet werkzeug server: moto's ThreadedMotoServer prints a
        # request line on stderr per call, in the middle of the demo's output
        app = DomainDispatcherApplication(create_backend_app)
        server, thread = serve_in_thread("127.0.0.1", 0, app, QuietRequestHandler, "moto-s3")
        host, port = "127.0.0.1", server.server_port
        env = {
            "AWS_ACCESS_KEY_ID": "mmirage-demo",
            "AWS_SECRET_ACCESS_KEY": "mmirage-demo-not-a-real-key",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_S3": f"http://{host}:{port}",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            self._s3().create_bucket(Bucket="mmirage-demo")
            yield {
                "endpoint_url": base_url,
                "region": "us-east-1",
                "role_arn": f"arn:aws:iam::{ACCOUNT}:role/mmirage-demo",
                "s3_staging_uri": "s3://mmirage-demo/runs",
                # one job per output: at least Bedrock's minimum of 100 records (a
                # smaller --rows is padded, see docs/providers.md)
                "max_requests_per_chunk": max(self.min_records, rows),
            }
        finally:
            stop_serving(server, thread)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def claims(self, request: Request) -> bool:
        """Whether the request's path is one of Bedrock's routes."""
        return request.path.startswith(self.PREFIXES)

    @property
    def _state(self) -> dict[str, Any]:
        return self.store.provider_state.setdefault(BEDROCK, {"jobs": {}, "tokens": {}})

    def handle(self, request: Request) -> Response:
        """Serve one Bedrock request (errors in AWS's rest-json shape)."""
        try:
            endpoint, args = self._url_map.bind("fake").match(request.path, method=request.method)
        except HTTPException as exc:
            return _error(BedrockError(exc.code or 404, "UnknownOperationException", exc.name))
        name = f"bedrock_{endpoint}"
        with self.store.lock:
            self.store.call_counts[name] = self.store.call_counts.get(name, 0) + 1
        try:
            region = _signed_region(request)
            leading = self.store.take_leading_error(name)
            if leading is not None:
                raise _scripted(leading[0], f"leading error on {name}")
            op, body = getattr(self, f"_{endpoint}")(request, region, **args)
            output_shape = self._model.operation_model(op).output_shape
            # Members newer than the installed botocore (errorRecordCount... on 1.35.1,
            # setup.py's floor) are sent as the service sends them, and left out of the
            # check: botocore's parser skips members its model does not have.
            problems = check_shape(known_members(body, output_shape), output_shape)
            if problems:
                raise AssertionError(f"the fake's {op} answer breaks the model: {problems}")
            # timestamps are epoch seconds already: rest-json's default format
            return Response(json.dumps(body), 200, mimetype="application/json")
        except BedrockError as err:
            return _error(err)
        except Exception:  # a bug in the fake: answer 500 rather than drop the connection
            _LOG.exception("the Bedrock fake failed on %s %s", request.method, request.path)
            return _error(
                BedrockError(500, "InternalServerException", "Internal error in the fake.")
            )

    # -- operations -------------------------------------------------------------------
    def _validate(self, op: str, params: dict[str, Any]) -> None:
        problems = check_shape(params, self._model.operation_model(op).input_shape)
        if problems:
            raise _validation("; ".join(problems))

    def _create_job(self, request: Request, region: str) -> tuple[str, dict[str, Any]]:
        op = "CreateModelInvocationJob"
        try:
            params = json.loads(request.get_data(cache=False) or b"{}")
        except ValueError as exc:
            raise _validation(f"the body is not JSON: {exc}") from None
        if not isinstance(params, dict):
            raise _validation("the body is not a JSON object")
        self._validate(op, params)
        token = params.get("clientRequestToken")
        same = {k: v for k, v in params.items() if k != "clientRequestToken"}
        with self.store.lock:
            known = self._state["tokens"].get(token) if token else None
            if known is not None:
                job = self._state["jobs"][known]
                if job.params != same:
                    raise BedrockError(
                        409,
                        "ConflictException",
                        f"clientRequestToken {token} was used by another request with "
                        "different parameters",
                    )
                return op, {"jobArn": job.arn}
            failure = self.store.take_create_failure()
            if failure is not None and not failure.created:
                raise _scripted(failure.status, "create")
            job = self._new_job(params, same, region)
            if token:
                job.token = token
                self._state["tokens"][token] = job.batch.id
            if failure is not None:
                raise _scripted(failure.status, "create (the job was made)")
            return op, {"jobArn": job.arn}

    def _new_job(self, params: dict[str, Any], same: dict[str, Any], region: str) -> _Job:
        now = self.store.clock()
        batch = self.store.new_batch(BEDROCK, "", now)
        del self.store.batches[batch.id]  # kept here, out of the shared batch views
        batch.id = "".join(
            secrets.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(12)
        )
        batch.model = params["modelId"]
        arn = f"arn:aws:bedrock:{region}:{ACCOUNT}:model-invocation-job/{batch.id}"
        job = _Job(batch, arn, copy.deepcopy(same))
        self._state["jobs"][batch.id] = job
        self._fill(job)
        return job

    def _s3(self) -> Any:
        import boto3

        return boto3.session.Session().client("s3", endpoint_url=self.s3_endpoint_url)

    def _fill(self, job: _Job) -> None:
        """Read the job's input from S3 and answer every record (results are written
        when the job ends)."""
        uri = job.params["inputDataConfig"]["s3InputDataConfig"]["s3Uri"]
        bucket, _, key = uri[len("s3://") :].partition("/")
        try:
            content = self._s3().get_object(Bucket=bucket, Key=key)["Body"].read()
        except Exception as exc:  # noqa: BLE001 - the job fails, as Bedrock's validation does
            job.batch.errors = [{"message": f"cannot read {uri}: {exc}"}]
            job.message = f"Unable to read the input file {uri}."
            return
        raw_lines = [ln for ln in content.split(b"\n") if ln.strip()]
        if not raw_lines or len(raw_lines) < self.min_records or len(raw_lines) > MAX_RECORDS:
            job.batch.errors = [{"message": "record count"}]
            job.message = (
                f"The input holds {len(raw_lines)} records; a batch inference job takes "
                f"{self.min_records} to {MAX_RECORDS} records."
            )
            return
        for raw in raw_lines:
            try:
                record = json.loads(raw)
            except ValueError:
                record = None
            if not isinstance(record, dict) or not isinstance(record.get("recordId"), str):
                job.batch.errors = [{"message": "bad line"}]
                job.message = "A line of the input is not a {recordId, modelInput} object."
                job.batch.items = []
                return
            rid = record["recordId"]
            self.store.record(job.batch, rid, record)
            job.batch.items.append(self._process(job, rid, record.get("modelInput")))
        job.batch.prompt_tokens = sum(it.input_tokens for it in job.batch.items)

    def _process(self, job: _Job, rid: str, body: Any) -> Item:
        family = _family(job.batch.model or "")
        reason = _check_body(family, body)
        if reason is not None:
            return Item(rid, _error_line(rid, body, 400, reason), ok=False)
        prompt, images, mode, schema = _prompt_of(family, body)
        marker = self.store.resolve_transient(error_marker(prompt), rid, prompt)
        if family == "meta" and marker == "refusal":
            marker = None  # Llama's answer has no refusal reason
        if marker == "content_filter":
            marker = None  # neither family has a content-filter stop reason
        if marker in FAILURES:
            code, message = FAILURES[marker]
            line = _error_line(rid, body, code, message)
            if marker == "u2028":
                return Item(rid, json.dumps(line, ensure_ascii=False).encode(), ok=False)
            return Item(rid, line, ok=False)
        answer = make_answer(prompt, images, mode, schema, marker)
        if marker == "error_body_200":
            output: dict[str, Any] = {
                "type": "error",
                "error": {"type": "api_error", "message": "Scripted error body."},
            }
        elif marker == "empty_body_200":
            output = {}
        elif family == "anthropic":
            stop = {"refusal": "refusal", "length": "max_tokens"}.get(answer.finish, "end_turn")
            output = {
                "id": "msg_bdrk_" + secrets.token_hex(12),
                "type": "message",
                "role": "assistant",
                "model": job.batch.model,
                "content": [{"type": "text", "text": answer.text}],
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": answer.input_tokens,
                    "output_tokens": answer.output_tokens,
                },
            }
        else:
            output = {
                "generation": answer.text,
                "prompt_token_count": answer.input_tokens,
                "generation_token_count": answer.output_tokens,
                "stop_reason": "length" if answer.finish == "length" else "stop",
            }
        line = {"recordId": rid, "modelInput": body, "modelOutput": output}
        return answered_response_item(
            marker, rid, line, answer, id_key="recordId", body_key="modelOutput"
        )

    def _job(self, ident: str) -> _Job:
        job_id = ident.rsplit("/", 1)[-1]
        job = self._state["jobs"].get(job_id)
        if job is None:
            raise BedrockError(
                404, "ResourceNotFoundException", f"The job {ident} could not be found."
            )
        return job

    def _get_job(self, request: Request, region: str, ident: str) -> tuple[str, dict[str, Any]]:
        self._validate("GetModelInvocationJob", {"jobIdentifier": ident})
        with self.store.lock:
            return "GetModelInvocationJob", self.view(self._job(ident), self.store.clock())

    def _stop_job(self, request: Request, region: str, ident: str) -> tuple[str, dict[str, Any]]:
        self._validate("StopModelInvocationJob", {"jobIdentifier": ident})
        with self.store.lock:
            job = self._job(ident)
            now = self.store.clock()
            status = self.view(job, now)["status"]
            lifecycle.request_cancel(
                job.batch,
                now,
                ended=status in TERMINAL,
                refusal=_validation(f"The job {ident} is {status} and cannot be stopped."),
            )
            return "StopModelInvocationJob", {}

    def _list_jobs(self, request: Request, region: str) -> tuple[str, dict[str, Any]]:
        op = "ListModelInvocationJobs"
        shape = self._model.operation_model(op).input_shape
        params: dict[str, Any] = {}
        for name, member in shape.members.items():
            raw = request.args.get(member.serialization.get("name", name))
            if raw is None:
                continue
            if member.type_name == "integer":
                try:
                    params[name] = int(raw)
                except ValueError:
                    raise _validation(f"{name} must be an integer, got {raw!r}") from None
            elif member.type_name == "timestamp":
                params[name] = _parse_time(name, raw)
            else:
                params[name] = raw
        self._validate(op, params)
        with self.store.lock:
            now = self.store.clock()
            views = [self.view(job, now) for job in self._state["jobs"].values()]
        after, before = params.get("submitTimeAfter"), params.get("submitTimeBefore")
        views = [
            v
            for v in views
            if params.get("nameContains", "") in v["jobName"]
            and params.get("statusEquals") in (None, v["status"])
            and (after is None or v["submitTime"] >= after)
            and (before is None or v["submitTime"] <= before)
        ]
        views.sort(key=lambda v: v["submitTime"], reverse=params.get("sortOrder") == "Descending")
        start = int(params.get("nextToken") or 0)
        size = params.get("maxResults", 1000)
        page = views[start : start + size]
        body: dict[str, Any] = {"invocationJobSummaries": page}
        if start + size < len(views):
            body["nextToken"] = str(start + size)
        return op, body

    # -- views ------------------------------------------------------------------------
    def view(self, job: _Job, now: float) -> dict[str, Any]:
        """The ``GetModelInvocationJobResponse`` at ``now`` (outputs written to S3 once
        the job has ended)."""
        batch = job.batch
        status, ended = _phase(batch, now)
        if status in TERMINAL and status != "Failed":
            lifecycle.finish_once(batch, lambda b, done, rest, cancelled: self._write(job, done))
        d = batch.delay_secs
        out: dict[str, Any] = {
            "jobArn": job.arn,
            "jobName": job.params["jobName"],
            "modelId": job.params["modelId"],
            "roleArn": job.params["roleArn"],
            "status": status,
            "submitTime": batch.created,
            "lastModifiedTime": ended if ended is not None else now,
            "inputDataConfig": copy.deepcopy(job.params["inputDataConfig"]),
            "outputDataConfig": copy.deepcopy(job.params["outputDataConfig"]),
            "timeoutDurationInHours": job.params.get("timeoutDurationInHours", 24),
            "jobExpirationTime": batch.created
            + 3600 * job.params.get("timeoutDurationInHours", 24),
        }
        if job.token:
            out["clientRequestToken"] = job.token
        if ended is not None:
            out["endTime"] = ended
        if job.message:
            out["message"] = job.message
        if status != "Failed" and now >= batch.created + d / 3:
            done = lifecycle.processed(batch, now if ended is None else ended)
            if batch.cancel_requested_at is not None:
                done = min(done, lifecycle.processed(batch, batch.cancel_requested_at))
            ok = sum(1 for it in batch.items[:done] if it.ok)
            out.update(
                totalRecordCount=len(batch.items),
                processedRecordCount=done,
                successRecordCount=ok,
                errorRecordCount=done - ok,
            )
        return out

    def _write(self, job: _Job, done: list[Item]) -> None:
        """Write ``<out>/<jobId>/<input name>.out`` and ``manifest.json.out``."""
        lines: list[Any] = [it.line for it in done]
        if job.batch.unknown_custom_id:
            stray = UNKNOWN_CUSTOM_ID.replace("Z", "ZZ").replace("_", "ZU").replace("-", "ZD")
            lines.append({"recordId": stray, "modelInput": {}, "modelOutput": {"generation": "x"}})
        lines = scripting.shuffled(job.batch.shuffle_seed, lines)
        out_uri = job.params["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"].rstrip("/")
        in_uri = job.params["inputDataConfig"]["s3InputDataConfig"]["s3Uri"]
        bucket, _, prefix = out_uri[len("s3://") :].partition("/")
        folder = "/".join(p for p in (prefix, job.batch.id) if p)
        ok = [it for it in done if it.ok]
        manifest = {
            "totalRecordCount": len(job.batch.items),
            "processedRecordCount": len(done),
            "successRecordCount": len(ok),
            "errorRecordCount": len(done) - len(ok),
            "inputTokenCount": sum(it.input_tokens for it in done),
            "outputTokenCount": sum(it.output_tokens for it in done),
        }
        s3 = self._s3()
        s3.put_object(
            Bucket=bucket, Key=f"{folder}/{in_uri.rsplit('/', 1)[-1]}.out", Body=jsonl(lines)
        )
        s3.put_object(
            Bucket=bucket, Key=f"{folder}/manifest.json.out", Body=json.dumps(manifest).encode()
        )


def _phase(batch: Batch, now: float) -> tuple[str, Optional[float]]:
    """(status, endTime) at ``now``."""
    d, t0 = batch.delay_secs, batch.created
    start, end = t0 + d / 3, t0 + d
    tc = batch.cancel_requested_at
    if tc is not None:
        done = tc + d / 3
        return ("Stopping", None) if now < done else ("Stopped", done)
    if batch.errors and not batch.items:
        return ("Failed", start) if now >= start else ("Validating", None)
    if now < start:
        if now < t0 + d / 6:
            return "Submitted", None
        return ("Validating", None) if now < t0 + d / 4 else ("Scheduled", None)
    if now < end:
        if batch.stop_kind == "cancelled" and now >= t0 + 2 * d / 3:
            return "Stopping", None
        return "InProgress", None
    if batch.stop_kind == "cancelled":
        return "Stopped", end
    if batch.stop_kind == "expired":
        return "Expired", end
    partial = any(not it.ok for it in batch.items)
    return ("PartiallyCompleted" if partial else "Completed"), end


def _family(model: str) -> str:
    parts = model.rsplit("/", 1)[-1].split(".")
    for part in parts[:2]:
        if part in ("anthropic", "meta"):
            return part
    return "unknown"


def _check_body(family: str, body: Any) -> Optional[str]:
    """Why ``body`` is not a valid InvokeModel body of ``family`` (None: it is)."""
    if not isinstance(body, dict):
        return "modelInput must be a JSON object"
    if family == "anthropic":
        if body.get("anthropic_version") != "bedrock-2023-05-31":
            return "anthropic_version: must be bedrock-2023-05-31"
        max_tokens = body.get("max_tokens")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            return "max_tokens: required, an integer >= 1"
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return "messages: required, a non-empty list"
        if "model" in body:
            return "extraneous key [model] is not permitted"
        return None
    if family == "meta":
        if not isinstance(body.get("prompt"), str) or not body["prompt"]:
            return "prompt: required, a non-empty string"
        gen = body.get("max_gen_len", 512)
        if isinstance(gen, bool) or not isinstance(gen, int) or not 1 <= gen <= MAX_LLAMA_GEN_LEN:
            return f"max_gen_len: an integer in [1, {MAX_LLAMA_GEN_LEN}]"
        return None
    return "the fake answers Anthropic and Meta models only"


def _prompt_of(family: str, body: dict[str, Any]) -> tuple[str, int, str, Any]:
    """(prompt text, image count, answer mode, schema) of a valid body."""
    if family == "anthropic":
        texts: list[str] = []
        images = 0
        for msg in body["messages"]:
            if isinstance(msg, dict) and msg.get("role") == "user":
                texts += text_parts(msg.get("content"), ("text",))
                images += count_parts(msg.get("content"), ("image",))
        fmt = (body.get("output_config") or {}).get("format") or {}
        if fmt.get("type") == "json_schema":
            return "\n".join(texts), images, "json_schema", fmt.get("schema")
        return "\n".join(texts), images, "text", None
    match = _LLAMA_USER.search(body["prompt"])
    text = match.group(1) if match else body["prompt"]
    if _LLAMA_JSON in text:
        prompt, _, schema = text.partition(_LLAMA_JSON)
        try:
            return prompt.rstrip(), 0, "json_schema", json.loads(schema)
        except ValueError:
            pass
    return text, 0, "text", None


def _error_line(rid: str, body: Any, code: int, message: str) -> dict[str, Any]:
    return {
        "recordId": rid,
        "modelInput": body,
        "error": {"errorCode": code, "errorMessage": message},
    }


def _scripted(status: int, what: str) -> BedrockError:
    code = {
        429: "ThrottlingException",
        404: "ResourceNotFoundException",
        409: "ConflictException",
        403: "AccessDeniedException",
    }.get(status, "InternalServerException" if status >= 500 else "ValidationException")
    return BedrockError(status, code, f"Scripted {status} from the fake provider ({what}).")


def _signed_region(request: Request) -> str:
    """The region of the request's SigV4 signature.

    Raises:
        BedrockError: 403 ``AccessDeniedException`` for an unsigned request.
    """
    auth = request.headers.get("Authorization", "")
    match = re.search(r"Credential=[^/]+/\d{8}/([a-z0-9-]+)/bedrock/aws4_request", auth)
    if not auth.startswith("AWS4-HMAC-SHA256 ") or match is None:
        raise BedrockError(403, "AccessDeniedException", "Missing Authentication Token")
    return match.group(1)


def _parse_time(name: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        when = _dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise _validation(f"{name} must be a timestamp, got {raw!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return when.timestamp()


def _error(err: BedrockError) -> Response:
    return Response(
        json.dumps({"message": err.message}),
        err.status,
        headers={"x-amzn-ErrorType": err.code},
        mimetype="application/json",
    )
