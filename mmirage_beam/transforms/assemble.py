"""Assemble one merged row: its outcomes across linked runs, checked, rendered.

:class:`_AssembleFn` is what :mod:`mmirage_beam.transforms.merge`'s join runs for each
source_index: the best outcome per output (``OutputResult.better_than``), each answer
checked (``results.check_answer``), the row rendered (``output_schema``, ``rows.py``),
usage counted, and the row's errors and reusable answers tagged beside it.
"""

from __future__ import annotations

from typing import Any, Iterator, NamedTuple, Sequence

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from mmirage_beam.config.loader import OutputConfig
from mmirage_beam.config.schema import json_schema_for
from mmirage_beam.jsonl import json_line
from mmirage_beam.metrics import METRICS_NAMESPACE
from mmirage_beam.results import check_answer
from mmirage_beam.reuse import answer_record
from mmirage_beam.transforms.build import _clean_text
from mmirage_beam.transforms.fetch import NEVER_SUBMITTED, OutputResult, error_record
from mmirage_beam.transforms.render import MISSING, PromptTemplate, SchemaRenderer, make_environment
from mmirage_beam.transforms.rows import assemble_output_row

__all__ = ["ERRORS_TAG", "ANSWERS_TAG", "MergedRow"]


ERRORS_TAG = "errors"
ANSWERS_TAG = "answers"

#: characters of a failed output's prompt kept in its errors-file line (``prompt``); a
#: longer prompt is cut there and its whole length given (``prompt_chars``)
PROMPT_CHARS = 20_000


class MergedRow(NamedTuple):
    source_index: int
    line: bytes


class _AssembleFn(beam.DoFn):
    """``(source_index, grouped)`` -> the row's :class:`MergedRow`, its error records
    (``errors``) and answers (``answers``). ``grouped``: ``"results"`` (the row's
    ``OutputResult``), and only when it has them ``"rows"`` (its ``ExtractedRow``),
    ``"changed"`` (chunk keys, sorted), ``"skipped"`` (reasons), ``"keys"`` (custom_id
    -> answer key)."""

    def __init__(
        self,
        outputs: Sequence[OutputConfig],
        schema: Any,
        remove_columns: bool,
        settings_key: str = "",
    ):
        self._settings_key = settings_key  # of the answers' keys (reuse.settings_key)
        self._outputs = tuple(outputs)
        self._schema = schema
        self._remove = remove_columns
        self._rows = Metrics.counter(METRICS_NAMESPACE, "rows_written")
        self._ok = Metrics.counter(METRICS_NAMESPACE, "outputs_succeeded")
        self._failed_rows = Metrics.counter(METRICS_NAMESPACE, "rows_with_failures")
        self._missing_rows = Metrics.counter(METRICS_NAMESPACE, "missing_source_rows")
        self._changed_rows = Metrics.counter(METRICS_NAMESPACE, "source_changed_rows")
        self._in = Metrics.counter(METRICS_NAMESPACE, "input_tokens")
        self._out = Metrics.counter(METRICS_NAMESPACE, "output_tokens")
        self._usage: dict[str, tuple[Any, Any]] = {}

    def setup(self) -> None:
        self._renderer = SchemaRenderer(self._schema) if self._schema is not None else None
        env = make_environment(reject_null=True)  # as the submission renders them
        self._prompts = {o.name: PromptTemplate(o.prompt, env) for o in self._outputs if o.prompt}
        self._json_schemas = {
            o.name: json_schema_for(o.output_schema)
            for o in self._outputs
            if o.output_type == "JSON"
        }

    def _count_usage(self, output_name: str, input_tokens: Any, output_tokens: Any) -> None:
        """Per-output usage counters ``used_input_tokens:<output>`` /
        ``used_output_tokens:<output>``, which ``mmirage merge`` prices
        (:func:`mmirage_beam.costs.report.usage_lines`); made once per output name."""
        pair = self._usage.get(output_name)
        if pair is None:
            pair = self._usage[output_name] = (
                Metrics.counter(METRICS_NAMESPACE, f"used_input_tokens:{output_name}"),
                Metrics.counter(METRICS_NAMESPACE, f"used_output_tokens:{output_name}"),
            )
        pair[0].inc(int(input_tokens or 0))
        pair[1].inc(int(output_tokens or 0))

    def _prompt_fields(self, output_name: str, rows: Sequence[Any], changed: Any) -> dict:
        """``{"prompt"}`` of a failed output for its errors-file line: its template
        rendered from the row's inputs as the submission rendered it (the text part; a
        multimodal request's images are not repeated), cut at :data:`PROMPT_CHARS` with
        ``prompt_chars`` then; {} when the row is missing or changed since (the prompt
        sent is not known then) or the template does not render."""
        template = self._prompts.get(output_name)
        if template is None or not rows or changed:
            return {}
        try:
            prompt = _clean_text(template.render(rows[0].values))
        except Exception:  # noqa: BLE001 - the prompt is a help, never the merge's failure
            return {}
        if len(prompt) <= PROMPT_CHARS:
            return {"prompt": prompt}
        return {"prompt": prompt[:PROMPT_CHARS], "prompt_chars": len(prompt)}

    def _failed(self, kind: str) -> None:
        Metrics.counter(METRICS_NAMESPACE, f"failed_{kind}").inc()

    def process(self, element: tuple[int, dict[str, list]]) -> Iterator[Any]:
        source_index, grouped = element
        results: list[OutputResult] = list(grouped["results"])
        if grouped.get("skipped"):  # skipped at submission: never submitted on purpose
            results = [r for r in results if (r.error or {}).get("type") != NEVER_SUBMITTED]
        if results:
            yield from self._assemble(source_index, results, grouped)
        elif grouped.get("skipped"):
            yield from self._skipped(source_index, grouped)
        # else: a row this merge submitted nothing for

    def _null_shape(self, values: dict[str, Any], source_index: int) -> dict[str, Any]:
        """A row that cannot be rendered: the configured ``output_schema``'s keys (else
        the outputs) with null values, and ``source_index``."""
        if isinstance(self._schema, dict):
            out: dict[str, Any] = {str(k): None for k in self._schema}
        else:
            out = {name: None for name in values}
        out["source_index"] = source_index
        return out

    def _render(self, extracted: Any, values: dict[str, Any], source_index: int) -> dict[str, Any]:
        """The output row of ``extracted`` (the row's ``ExtractedRow``) with the outputs'
        ``values`` (``MISSING`` where an output has no usable answer): the configured
        ``output_schema`` rendered (else the outputs), ``remove_columns`` applied.

        Raises:
            Exception: whatever rendering raises (a template the values do not fit); the
                callers decide what a row that cannot be rendered becomes.
        """
        return assemble_output_row(
            extracted.row,
            extracted.values,
            values,
            self._renderer,
            self._remove,
            source_index,
        )

    def _skipped(self, source_index: int, grouped: dict[str, list]) -> Iterator[Any]:
        """A row left out at submission (--skip-invalid-rows): written, marked, no outputs.

        A row that could not even be read (e.g. a line that is not JSON) is written with
        its ``source_index``, null outputs and the reason.
        """
        values = {o.name: MISSING for o in self._outputs}
        out = None
        if grouped.get("rows"):
            try:
                out = self._render(grouped["rows"][0], values, source_index)
            except Exception:  # rendered from null inputs; the raw columns are enough
                out = None
        if out is None:
            out = {o.name: None for o in self._outputs}
            out["source_index"] = source_index
        out["mmirage_skipped"] = grouped["skipped"][0]
        Metrics.counter(METRICS_NAMESPACE, "rows_skipped_invalid").inc()
        self._rows.inc()
        yield MergedRow(source_index, json_line(out, default=_json_default))

    def _assemble(
        self, source_index: int, results: list[OutputResult], grouped: dict[str, list]
    ) -> Iterator[Any]:
        tokens_in = tokens_out = 0
        cached: dict[str, int] = {}
        reported = False
        rows = grouped.get("rows") or ()
        changed = grouped.get("changed") or ()
        # Per output, across linked runs: the newest success, else the newest failure.
        by_output: dict[str, OutputResult] = {}
        for r in results:
            if r.better_than(by_output.get(r.output_name)):
                by_output[r.output_name] = r
            if r.reused_from:  # paid by the earlier run: counted apart, not billed again
                for name, n in (("input", r.input_tokens), ("output", r.output_tokens)):
                    Metrics.counter(METRICS_NAMESPACE, f"reused_{name}_tokens:{r.output_name}").inc(
                        int(n or 0)
                    )
                continue
            if r.input_tokens is not None:  # every attempt's usage was billed
                reported = True
                tokens_in += int(r.input_tokens or 0)
                tokens_out += int(r.output_tokens or 0)
                self._count_usage(r.output_name, r.input_tokens, r.output_tokens)
            for key, n in (r.cache_tokens or {}).items():
                cached[key] = cached.get(key, 0) + int(n)
                Metrics.counter(METRICS_NAMESPACE, f"used_{key}:{r.output_name}").inc(int(n))
        values: dict[str, Any] = {}
        errors: dict[str, dict[str, Any]] = {}
        for output in self._outputs:
            r = by_output.get(output.name)
            if r is None:
                continue
            if not rows or changed:
                kind = "source_changed" if changed else "missing_source_row"
                why = (
                    f"the source row no longer matches what was submitted (chunk "
                    f"{changed[0]}); the answer is not joined. Re-send it built from the "
                    "current row: mmirage resubmit --config C --from OUT.errors.jsonl"
                    if changed
                    else "the source dataset has no row with this source_index any more"
                )
                errors[output.name] = error_record(kind, why)
                errors[output.name]["retryable"] = bool(changed)  # a resubmission fixes it
                values[output.name] = MISSING
            elif r.error is not None:
                errors[output.name] = r.error
                values[output.name] = MISSING
            else:
                value, err = check_answer(
                    output.output_type,
                    r.text,
                    self._json_schemas.get(output.name),
                    output.dimensions,
                )
                if err is None:
                    values[output.name] = value
                    self._ok.inc()
                else:
                    # The row is marked and keeps the raw text; templates see a missing
                    # value, so "{{ answer.field }}" renders null instead of failing.
                    values[output.name] = MISSING
                    errors[output.name] = err
        if not rows:
            self._missing_rows.inc()
        if changed:
            self._changed_rows.inc()
        out = None
        if rows:  # a changed row too: its fields from the row, its answers null
            try:
                out = self._render(rows[0], values, source_index)
            except Exception as exc:  # a template the values do not fit: mark, never crash
                Metrics.counter(METRICS_NAMESPACE, "render_failures").inc()
                errors["output_schema"] = error_record(
                    "render_failed", f"output_schema could not be rendered: {exc}"
                )
        if out is None:
            out = self._null_shape(values, source_index)
        if reported:
            out["input_tokens"] = tokens_in
            out["output_tokens"] = tokens_out
            self._in.inc(tokens_in)
            self._out.inc(tokens_out)
            out.update(cached)  # cache_read_input_tokens / cache_creation_input_tokens
        reused = {
            name: r.reused_from for name, r in by_output.items() if r.reused_from and name in values
        }
        if reused:
            out["mmirage_reused_from"] = reused  # beside mmirage_errors: per output
            Metrics.counter(METRICS_NAMESPACE, "outputs_reused").inc(len(reused))
        keys = grouped.get("keys") or {}
        for name, r in by_output.items():  # answers a later run may reuse
            key = keys.get(r.custom_id)
            if key and name in values and name not in errors and values[name] is not MISSING:
                yield pvalue.TaggedOutput(
                    ANSWERS_TAG,
                    answer_record(
                        key,
                        r.provider,
                        r.provider_batch_id,
                        r.reused_custom_id or r.custom_id,
                        r.reused_from or r.run_id,
                        self._settings_key,
                    ),
                )
        if errors:
            out["mmirage_errors"] = errors
            self._failed_rows.inc()
            for name, err in errors.items():
                self._failed(err["type"])
                cid = by_output[name].custom_id if name in by_output else None
                yield pvalue.TaggedOutput(
                    ERRORS_TAG,
                    {
                        "custom_id": cid,
                        "run_id": by_output[name].run_id if name in by_output else None,
                        "source_index": source_index,
                        "output_name": name,
                        "error_type": err["type"],
                        "message": err.get("message", ""),
                        "status_code": err.get("status_code"),
                        "retryable": bool(err.get("retryable")),
                        # the provider's code and param, when it gave them
                        **{k: err[k] for k in ("code", "param") if err.get(k) is not None},
                        **self._prompt_fields(name, rows, changed),
                    },
                )
        self._rows.inc()
        yield MergedRow(source_index, json_line(out, default=_json_default))


def _json_default(value: Any) -> Any:
    if value is MISSING:
        return None
    return str(value)
