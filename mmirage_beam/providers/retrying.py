"""Retries for provider calls: exponential backoff with full jitter that honours the
server's ``retry-after-ms`` / ``retry-after`` headers.

Adapters build their SDK clients with the SDK's own retries off (``max_retries=0``), so
every retry of an upload, a batch create, a status read or a result download goes
through :func:`call_with_retries`. That keeps one policy (and one log line per retry)
for every provider, and lets an adapter run its own step before a retried create (the
OpenAI adapter looks for the batch the failed attempt may have created and adopts it).

Which errors are retried is decided by one predicate per service, built with
:func:`make_retry_filter` from that SDK's exception classes: connection errors and
timeouts, and HTTP 408, 409, 429 and every status >= 500 (529 "overloaded" included),
unless the server says otherwise with ``x-should-retry``. Anything else (400, 401, 404,
413 ...) is raised at once, unchanged.

The delay before retry ``n`` (1-based) is the server's ``retry-after-ms`` when present,
else its ``retry-after`` (seconds or an HTTP date), capped at
``RetryPolicy.max_retry_after_secs``; without either header it is "full jitter":
``uniform(0, min(max_delay_secs, initial_delay_secs * factor ** (n - 1)))``.

Example::

    batch = call_with_retries(
        lambda: client.batches.retrieve(batch_id),
        what="OpenAI batches.retrieve(batch_abc)",
        retry_filter=make_retry_filter((openai.APIConnectionError,), (openai.APIStatusError,)),
    )

Raises :class:`ProviderRetriesExhausted` (exit status 1) when the last attempt fails
with a retryable error; its message names the call, the number of attempts and the last
status and message. It never carries request bodies or credentials.
"""

from __future__ import annotations

import email.utils
import logging
import random
import sys
import time
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    ContextManager,
    Iterable,
    Iterator,
    Mapping,
    Optional,
    Tuple,
    Type,
    TypeVar,
)

from mmirage_beam.errors import MmirageError
from mmirage_beam.jsonl import RawLine, iter_raw_lines

_LOG = logging.getLogger(__name__)

T = TypeVar("T")

#: HTTP statuses below 500 that are worth retrying; every status >= 500 is retried too.
RETRYABLE_STATUS_CODES = frozenset({408, 409, 429})
#: the longest provider message kept in a log line or an error, in characters.
_MAX_MESSAGE_CHARS = 300


class ProviderRetriesExhausted(MmirageError):
    """A provider call still failed with a retryable error after its last attempt.

    The message says which call failed, after how many attempts, and the last HTTP
    status and provider message (or the connection error). Callers add what to do next
    (e.g. the resume command). Exit status 1.

    Attributes:
        call: what was called, e.g. ``"OpenAI batches.create (chunk answer-text-0003)"``.
        attempts: how many attempts were made.
        status_code: the last HTTP status, None for a connection error.
        last_error: a one-line summary of the last error.
    """

    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        call: Optional[str] = None,
        attempts: Optional[int] = None,
        status_code: Optional[int] = None,
        last_error: Optional[str] = None,
    ) -> None:
        # One positional argument, so Beam can re-create it with the step name appended
        # and pickle can rebuild it; the attributes travel in ``__dict__``.
        super().__init__(message)
        self.call = call
        self.attempts = attempts
        self.status_code = status_code
        self.last_error = last_error


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry one provider call.

    Attributes:
        max_attempts: attempts in all, the first one included (1 = no retry).
        initial_delay_secs: the jitter ceiling before the first retry, in seconds.
        factor: the ceiling is multiplied by this after every retry.
        max_delay_secs: the largest jitter ceiling, in seconds.
        max_retry_after_secs: a server's ``retry-after(-ms)`` is honoured up to this
            many seconds (a longer request is cut to it).
    """

    max_attempts: int = 6
    initial_delay_secs: float = 0.5
    factor: float = 2.0
    max_delay_secs: float = 30.0
    max_retry_after_secs: float = 120.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_delay_secs < 0 or self.max_delay_secs < 0:
            raise ValueError("initial_delay_secs and max_delay_secs must be >= 0")
        if self.factor < 1:
            raise ValueError(f"factor must be >= 1, got {self.factor}")
        if self.max_retry_after_secs < 0:
            raise ValueError("max_retry_after_secs must be >= 0")

    def backoff_secs(self, retry: int, rand: Callable[[], float] = random.random) -> float:
        """Full-jitter delay before retry number ``retry`` (1-based), in seconds."""
        ceiling = min(self.max_delay_secs, self.initial_delay_secs * self.factor ** (retry - 1))
        return ceiling * rand()


def transport_errors() -> Tuple[Type[BaseException], ...]:
    """Low-level connection errors worth retrying: the builtins plus the HTTP client's
    ``TransportError`` (raised e.g. while a streamed result download is being read).

    Only HTTP client modules already loaded are looked at: this never imports one. An
    import here, on a submit thread, once put a half-initialised ``httpx`` into
    ``sys.modules`` that the SDK on a sibling thread then read
    (``partially initialized module 'httpx' has no attribute 'TimeoutException'``);
    a client never loaded cannot have raised anything.
    """
    found: list[Type[BaseException]] = [ConnectionError, TimeoutError]
    for name in ("httpx2", "httpx"):
        error = getattr(sys.modules.get(name), "TransportError", None)
        if isinstance(error, type) and issubclass(error, BaseException):
            found.append(error)
    return tuple(found)


def status_code_of(exc: BaseException) -> Optional[int]:
    """The HTTP status an SDK error carries (``.status_code``), else None."""
    code = getattr(exc, "status_code", None)
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def _headers_of(exc: BaseException) -> Any:
    # openai/anthropic: exc.response.headers; mistralai: exc.headers (exc.raw_response)
    response = getattr(exc, "response", None)
    return (
        getattr(response, "headers", None)
        if response is not None
        else getattr(exc, "headers", None)
    )


def _header(headers: Any, name: str) -> Optional[str]:
    if headers is None:
        return None
    try:
        value = headers.get(name)
    except Exception:  # not a mapping
        return None
    if value is None and isinstance(headers, Mapping):
        value = next((v for k, v in headers.items() if str(k).lower() == name), None)
    return None if value is None else str(value).strip()


def make_retry_filter(
    connection_errors: Tuple[Type[BaseException], ...],
    status_errors: Tuple[Type[BaseException], ...],
) -> Callable[[BaseException], bool]:
    """A retry predicate for one service.

    Args:
        connection_errors: exception classes that mean "the call may not have arrived"
            (e.g. ``openai.APIConnectionError``); always retried. :func:`transport_errors`
            are added.
        status_errors: exception classes carrying ``.status_code`` and
            ``.response.headers`` (e.g. ``openai.APIStatusError``); retried on 408, 409,
            429 and >= 500, or as the server's ``x-should-retry: true|false`` says.
            ``(Exception,)`` gives a duck-typed filter for any SDK whose errors carry
            ``.status_code``.

    Returns:
        ``retry_filter(exc) -> bool``.
    """
    statuses = tuple(status_errors)
    connection = tuple(connection_errors)

    def retry_filter(exc: BaseException) -> bool:
        code = status_code_of(exc)
        if statuses and isinstance(exc, statuses) and code is not None:
            should = _header(_headers_of(exc), "x-should-retry")
            if should in ("true", "false"):
                return should == "true"
            return code in RETRYABLE_STATUS_CODES or code >= 500
        return isinstance(exc, connection + transport_errors())

    return retry_filter


def retry_after_secs(exc: BaseException, now: Callable[[], float] = time.time) -> Optional[float]:
    """The wait the server asked for, in seconds: ``retry-after-ms``, else ``retry-after``
    (delta seconds or an HTTP date). None when absent or unreadable."""
    headers = _headers_of(exc)
    millis = _header(headers, "retry-after-ms")
    if millis:
        try:
            value = float(millis) / 1000.0
        except ValueError:
            value = -1.0
        if value >= 0:
            return value
    text = _header(headers, "retry-after")
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        value = max(0.0, when.timestamp() - now())
    return value if value >= 0 else None


def describe_error(exc: BaseException) -> str:
    """One line for logs and errors: ``HTTP 429 rate_limit_error: <provider message>`` or
    ``APIConnectionError: Connection error.``; never the request."""
    code = status_code_of(exc)
    if code is None:
        text = " ".join(str(exc).split()) or "no message"
        return f"{type(exc).__name__}: {text[:_MAX_MESSAGE_CHARS]}"
    body = getattr(exc, "body", None)
    kind, message = None, None
    if isinstance(body, Mapping):
        # OpenAI SDK: body is the inner error object; Anthropic: {"type", "error": {...}}.
        err = body.get("error") if isinstance(body.get("error"), Mapping) else body
        kind = err.get("type") or err.get("code")
        message = err.get("message")
    if not message:
        message = getattr(exc, "message", None) or str(exc)
    message = " ".join(str(message).split())[:_MAX_MESSAGE_CHARS]
    label = f"HTTP {code} {kind}" if kind else f"HTTP {code}"
    return f"{label}: {message}" if message else label


def call_with_retries(
    fn: Callable[[], T],
    *,
    what: str,
    retry_filter: Callable[[BaseException], bool],
    policy: Optional[RetryPolicy] = None,
    sleep: Callable[[float], None] = time.sleep,
    rand: Callable[[], float] = random.random,
    logger: logging.Logger = _LOG,
) -> T:
    """Call ``fn()`` until it returns, retrying the errors ``retry_filter`` accepts.

    Args:
        fn: the call; it is made again, unchanged, on every attempt, so it must be safe
            to repeat (a create must check for its own earlier success itself).
        what: names the call in logs and errors, e.g. ``"OpenAI files.create (chunk c)"``.
            Never put a key or a request body in it.
        retry_filter: ``exc -> bool``, True when ``exc`` is worth another attempt.
        policy: attempts and delays (default: ``RetryPolicy()``).
        sleep: called with each delay in seconds (tests pass a recorder).
        rand: uniform [0, 1) source for the jitter.
        logger: where each retry is logged, at WARNING.

    Returns:
        What ``fn`` returned.

    Raises:
        ProviderRetriesExhausted: the last of ``policy.max_attempts`` attempts failed
            with a retryable error (the error is chained as ``__cause__``).
        Exception: any error ``retry_filter`` rejects, unchanged, at once.
    """
    policy = policy or RetryPolicy()
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except Exception as exc:
            if not retry_filter(exc):
                raise
            attempts = f"{attempt} attempt{'s' if attempt != 1 else ''}"
            summary, delay = _summary_and_delay(exc, what, attempt, attempts, policy, rand)
            # a lookup's one retry of a 404 is said once, by its caller's report (issue
            # 38: 925 retry warnings in 3 minutes against the wrong account)
            level = logging.DEBUG if status_code_of(exc) == 404 else logging.WARNING
            logger.log(
                level,
                "%s failed (attempt %d of %d: %s); retrying in %.3f s",
                what,
                attempt,
                policy.max_attempts,
                summary,
                delay,
            )
            sleep(delay)


def stream_lines_with_retries(
    open_stream: Callable[[], ContextManager[Iterable[bytes]]],
    *,
    what: str,
    retry_filter: Callable[[BaseException], bool],
    policy: Optional[RetryPolicy] = None,
    sleep: Callable[[float], None] = time.sleep,
    logger: logging.Logger = _LOG,
) -> Iterator[RawLine]:
    """The lines of a downloaded file (split on ``b"\\n"`` only), streamed, retried.

    ``open_stream()`` opens the download and yields its byte blocks. Opening and reading
    are retried like :func:`call_with_retries`; a retry after lines were already yielded
    re-opens the download and skips the bytes of those lines, so no line is yielded
    twice; an attempt that read something starts a fresh budget of attempts. Memory: one
    line plus one block, never the file.

    Raises:
        ProviderRetriesExhausted: the last attempt failed with a retryable error.
        Exception: any error ``retry_filter`` rejects, at once.
    """
    policy = policy or RetryPolicy()
    done = lines_done = 0  # bytes and lines already yielded
    attempt = 0
    while True:
        attempt += 1
        try:
            start, first = done, lines_done
            with open_stream() as blocks:
                for line in iter_raw_lines(_skip_bytes(blocks, start)):
                    if start or first:  # a retry: numbered and placed in the whole file
                        line = line._replace(number=line.number + first, offset=line.offset + start)
                    yield line
                    done, lines_done = line.offset + line.length, line.number
            return
        except Exception as exc:
            if not retry_filter(exc):
                raise
            if done > start:  # this attempt made progress: a fresh budget of retries
                attempt = 1
            summary, delay = _summary_and_delay(
                exc, what, attempt, f"{attempt} attempts", policy, random.random
            )
            logger.warning(
                "%s failed (attempt %d of %d: %s) after %d byte(s); retrying in %.3f s",
                what,
                attempt,
                policy.max_attempts,
                summary,
                done,
                delay,
            )
            sleep(delay)


def _summary_and_delay(
    exc: BaseException,
    what: str,
    attempt: int,
    attempts: str,
    policy: RetryPolicy,
    rand: Callable[[], float],
) -> tuple[str, float]:
    """The one-line summary of attempt ``attempt``'s retryable error ``exc`` and the
    seconds to wait before the next attempt: the server's ``retry-after`` (capped at
    ``policy.max_retry_after_secs``), else the policy's jittered backoff.

    Raises:
        ProviderRetriesExhausted: it was the last attempt (``"<what> failed after
            <attempts>; last error: <summary>"``, ``exc`` chained as ``__cause__``).
    """
    summary = describe_error(exc)
    if attempt >= policy.max_attempts:
        raise ProviderRetriesExhausted(
            f"{what} failed after {attempts}; last error: {summary}",
            call=what,
            attempts=attempt,
            status_code=status_code_of(exc),
            last_error=summary,
        ) from exc
    asked = retry_after_secs(exc)
    if asked is not None:
        return summary, min(asked, policy.max_retry_after_secs)
    return summary, policy.backoff_secs(attempt, rand)


def _skip_bytes(blocks: Iterable[bytes], n: int) -> Iterator[bytes]:
    """``blocks`` without their first ``n`` bytes."""
    for block in blocks:
        if n >= len(block):
            n -= len(block)
            continue
        yield block[n:] if n else block
        n = 0
