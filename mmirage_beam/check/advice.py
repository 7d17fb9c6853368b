"""Advice: what a failed or unresolvable batch means, in plain words, and the command that
fixes it."""

from __future__ import annotations

from typing import (
    Dict,
    List,
    Optional,
)

from mmirage_beam.check.report import StatusReport
from mmirage_beam.run.lookup import LOOKUP_FAILED

__all__ = [
    "advice_lines",
]


# What a batch-level failure means and what to do, keyed by the provider's error code or
# status word (OpenAI Batch API and Anthropic Message Batches vocabularies).
_ADVICE = {
    "token_limit_exceeded": (
        "the organisation's limit on enqueued tokens for this model was reached when the "
        "batch was validated: none of its requests ran and nothing is billed. Wait until "
        "other batches of the model finish, then re-send it"
    ),
    "expired": (
        "the 24 h completion window ended before every request ran; the results that "
        "exist are kept (merge them) and only the rest needs re-sending"
    ),
    "cancelled": (
        "the batch was cancelled; results of requests that ran are kept (merge them) and "
        "only the rest needs re-sending"
    ),
    "errored": (
        "some requests failed (see the errors file that merge writes); retryable ones "
        "(server errors, rate limits) can be re-sent, invalid requests need a config fix"
    ),
}
_ADVICE["canceled"] = _ADVICE["cancelled"]
# the batch_<word> codes of the adapters whose jobs end expired or cancelled as a whole
# (Gemini, Vertex AI): the same meaning, and the same fix
_ADVICE["batch_expired"] = (
    "the batch expired before every request ran; the results that exist are kept (merge "
    "them) and only the rest needs re-sending"
)
_ADVICE["batch_cancelled"] = _ADVICE["cancelled"]
#: error codes whose batch a resubmission fixes (besides a failure without a code)
_RETRYABLE_CODES = (None, "token_limit_exceeded", "batch_expired", "batch_cancelled")
_FILE_REJECTED = (
    "the provider rejected the uploaded file ({code}); this is a request-building problem, "
    "not a transient one: check the config (model, batch_endpoint) and report it"
)


def advice_lines(report: StatusReport, config_arg: Optional[str]) -> List[str]:
    """Plain-words explanations of failed and unresolvable batches, with the command that
    fixes each (``mmirage resubmit`` / ``mmirage merge``). Empty when nothing failed."""
    config = config_arg or "C.yaml"
    lines: List[str] = []
    seen: set = set()
    children: Dict[str, set] = {}
    for st in report.statuses:
        parent = st.receipt.record.parent_run_id
        if parent:
            children.setdefault(parent, set()).add(st.receipt.run_id)
    for s in report.statuses:
        run = s.receipt.run_id
        if s.status == LOOKUP_FAILED and "connection" in (s.error or "").lower():
            key = ("unreachable", s.receipt.provider)
            text = (
                f"{s.receipt.provider} cannot be reached ({s.error}): check the network and "
                "the config's base_url; nothing is lost, run check again later"
            )
        elif s.status == LOOKUP_FAILED:
            key = ("lookup", s.receipt.provider)
            text = (
                f"{s.receipt.provider} does not know some batches (e.g. "
                f"{s.receipt.provider_batch_id}): check that the key and base_url are those "
                "of the account that submitted them, and that the receipts are this "
                "config's"
            )
        elif report.cancelled_on_purpose(s):
            key = ("on_purpose", run)
            text = (
                "cancelled with 'mmirage cancel', as asked: the requests that ran keep their "
                "results. Merge them (the rest is written as cancelled):\n    mmirage merge "
                f"--config {config} --run-id {run} --output-path OUT.jsonl\n    and only if "
                f"you want the rest after all: mmirage resubmit --config {config} --run-id {run}"
            )
        else:
            progress = s.progress
            word = (progress.provider_status if progress else "").lower()
            code = progress.error_code if progress else None
            failed_requests = bool(progress and progress.failed)
            if code:
                key = (code, run)
                text = _ADVICE.get(code) or _FILE_REJECTED.format(code=code)
            elif word in _ADVICE and s.status == "failed":
                key = (word, run)
                text = _ADVICE[word]
            elif failed_requests and s.terminal:
                detail = (progress.detail if progress else "").lower()
                outcome = next((w for w in ("expired", "canceled") if w in detail), "errored")
                key = (outcome, run)
                text = _ADVICE[outcome]
            else:
                continue
            retry = code in _RETRYABLE_CODES
            text += (
                f".\n    Fix: mmirage merge --config {config} --run-id {run} --output-path "
                f"OUT.jsonl, then mmirage resubmit --config {config} --run-id {run}"
                if retry
                else "."
            )
            if retry and run in children:
                text += (
                    f"\n    (already resubmitted as run(s) {', '.join(sorted(children[run]))}; "
                    "merge takes the newest successful results across them, and resubmit "
                    "re-sends only what is still failing)"
                )
        if key in seen:
            continue
        seen.add(key)
        lines.append(f"  - run {run}: {text}")
    return (["what this means:"] + lines) if lines else []
