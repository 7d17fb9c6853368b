"""``mmirage run --estimate sample``: a deterministic share of the requests is counted and
the estimate extrapolated, with a 95% error bound; the requests are the same.

Reference values: the exact counts of the bundled GSM8K config (tiktoken 0.14.0,
o200k_base; see tests/unit/test_costs.py): 114,041 input tokens for the 1,319 ``solution``
requests. The bound's formula is checked against :mod:`statistics` on the same numbers.
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

import pytest

from mmirage_beam.costs import tokens as t
from mmirage_beam.costs.report import estimate_lines
from mmirage_beam.errors import ConfigError
from tests.unit.test_costs import _bundled_gsm8k_config

_LINE = re.compile(
    r"  (?P<name>\w+): (?P<n>[\d,]+) request\(s\), input tokens (?P<approx>~?)(?P<tokens>[\d,]+) "
    r"\((?P<label>.*)$"
)
_BOUND = re.compile(r"sampled (?P<k>[\d,]+) of (?P<n>[\d,]+) requests, ±[\d.]+% \(±(?P<b>[\d,]+)\)")


def _num(text: str) -> int:
    return int(text.replace(",", ""))


def _dry_run(tmp_path: Path, capsys, *flags: str) -> tuple[dict[str, re.Match], bytes]:
    from pipelines.submit import main as run_main

    tmp_path.mkdir(parents=True, exist_ok=True)
    path = _bundled_gsm8k_config(tmp_path)
    export = tmp_path / "p.jsonl"
    argv = ["--config", path, "--export-prompts", str(export), "--run-id", "samplecheck1"]
    assert run_main([*argv, *flags]) == 0
    out = capsys.readouterr().out
    lines = {m["name"]: m for m in map(_LINE.match, out.split("\n")) if m}
    (exported,) = tmp_path.glob("p.*.jsonl")
    return lines, exported.read_bytes()


def test_sampled_estimate_is_within_its_bound_and_the_export_is_unchanged(tmp_path, capsys):
    exact, exact_bytes = _dry_run(tmp_path / "exact", capsys)
    sampled, sampled_bytes = _dry_run(tmp_path / "sample", capsys, "--estimate", "sample")
    assert exact_bytes == sampled_bytes  # the same requests, byte for byte
    assert _num(exact["solution"]["tokens"]) == 114_041
    assert "sampled" not in "".join(m[0] for m in exact.values())
    for name in ("solution", "grading", "total"):
        e, s = exact[name], sampled[name]
        assert e["approx"] == "" and s["approx"] == "~"
        assert s["n"] == e["n"]  # every request is still counted as a request
        bound = _BOUND.search(s["label"])
        assert bound is not None, s["label"]
        assert _num(bound["n"]) == _num(e["n"])
        assert 0 < _num(bound["k"]) < _num(e["n"]) * 0.05  # about 1% (the default)
        error = abs(_num(s["tokens"]) - _num(e["tokens"]))
        assert error <= _num(bound["b"]), (name, error, bound["b"])


def test_estimate_fraction_is_validated_before_anything_is_read(tmp_path, capsys):
    from pipelines.submit import main as run_main

    path = _bundled_gsm8k_config(tmp_path)
    base = ["--config", path, "--export-prompts", str(tmp_path / "p.jsonl")]
    for bad in ("0", "-0.5", "1.5", "nan", "half"):
        assert run_main([*base, "--estimate", "sample", "--estimate-fraction", bad]) == 2
        err = capsys.readouterr().err
        assert "--estimate-fraction" in err and "(0, 1]" in err
    assert run_main([*base, "--estimate-fraction", "0.1"]) == 2
    assert "only applies with --estimate sample" in capsys.readouterr().err
    assert not list(tmp_path.glob("p.*.jsonl"))
    with pytest.raises(ConfigError, match="sample_fraction"):
        from mmirage_beam.providers.openai import OpenAIBatchConfig
        from mmirage_beam.transforms.build import BuildRequests

        BuildRequests([object()], [], object, OpenAIBatchConfig(), sample_fraction=0.0)


def test_the_sample_is_a_function_of_the_custom_id():
    ids = [f"solution-text-{i}" for i in range(20_000)]
    picked = [c for c in ids if t.in_sample(c, 0.05)]
    assert picked == [c for c in ids if t.in_sample(c, 0.05)]
    assert 800 < len(picked) < 1_200  # 5% of 20,000, give or take
    smaller = {c for c in ids if t.in_sample(c, 0.01)}
    assert smaller <= set(picked)  # a smaller fraction samples a subset
    assert all(t.in_sample(c, 1.0) for c in ids[:100])


def test_bound_is_the_t_interval_of_the_mean_times_the_count():
    xs = [80, 95, 120, 60, 101, 99, 150, 70, 88, 110]  # the sampled requests' tokens
    total_n = 1_000
    r = {
        t.REQUESTS_COUNTED: total_n,
        t.REQUESTS_NOT_SAMPLED: total_n - len(xs),
        t.INPUT_TOKENS: sum(xs),
        t.INPUT_TOKENS_SQUARES: sum(x * x for x in xs),
    }
    est = t.sample_estimate(r)
    assert est.sampled == 10 and est.requests == total_n
    assert est.input_tokens == round(statistics.mean(xs) * total_n)
    se = statistics.stdev(xs) / math.sqrt(len(xs)) * math.sqrt(1 - len(xs) / total_n)
    assert est.bound_tokens == pytest.approx(2.262 * se * total_n)  # t(0.975, 9 df)
    assert t.sample_estimate({t.REQUESTS_COUNTED: 5, t.INPUT_TOKENS: 50}) is None  # exact
    one = t.sample_estimate({**r, t.REQUESTS_NOT_SAMPLED: total_n - 1})
    assert one.bound_tokens is None and one.upper_tokens is None


def _sampled_stats(xs: list[int], total_n: int, output: str = "a") -> dict[str, int]:
    return {
        f"{t.REQUESTS_COUNTED}:{output}": total_n,
        f"{t.REQUESTS_NOT_SAMPLED}:{output}": total_n - len(xs),
        f"{t.INPUT_TOKENS}:{output}": sum(xs),
        f"{t.INPUT_TOKENS_SQUARES}:{output}": sum(x * x for x in xs),
        f"{t.MAX_OUTPUT_TOKENS}:{output}": 100 * len(xs),
    }


def test_budget_warning_and_cost_use_the_upper_bound():
    from mmirage_beam.providers.openai import OpenAIBatchConfig

    xs = [80, 95, 120, 60, 101, 99, 150, 70, 88, 110]
    stats = _sampled_stats(xs, 1_000)
    est = t.sample_estimate({k.partition(":")[0]: v for k, v in stats.items()})
    assert est.input_tokens < 100_000 < est.upper_tokens  # 97,300 +- about 16,000
    text = "\n".join(
        estimate_lines(stats, OpenAIBatchConfig(model="gpt-4.1-mini", max_enqueued_tokens=100_000))
    )
    assert "input tokens ~97,300 (sampled 10 of 1,000 requests" in text
    assert "output tokens at most ~100,000" in text  # 100 per request, extrapolated
    assert "may exceed max_enqueued_tokens (100,000)" in text
    assert f"up to {est.upper_tokens:,} at the 95% bound" in text
    # the cost is priced at the upper bound of the input tokens
    price = 0.2 / 1_000_000  # gpt-4.1-mini batch input, USD per token (as printed)
    assert f"(input ${est.upper_tokens * price:,.4f}, at the 95% upper bound" in text
    few = "\n".join(estimate_lines(_sampled_stats([90], 1_000), OpenAIBatchConfig(model="m")))
    assert "input tokens unknown (1 of 1,000 requests of an output sampled" in few
    capped = OpenAIBatchConfig(model="m", max_enqueued_tokens=10)
    assert "too few requests sampled" in "\n".join(
        estimate_lines(_sampled_stats([90], 1_000), capped)
    )


def test_a_run_record_keeps_the_extrapolated_estimate():
    stats = {**_sampled_stats([80, 120], 100), "input_tokens:b": 7, "token_requests:b": 1}
    out = t.extrapolated_counters(stats)
    assert out["input_tokens:a"] == 10_000 and out["max_output_tokens:a"] == 10_000
    assert "token_requests_not_sampled:a" not in out and "input_tokens_squares:a" not in out
    assert out["input_tokens:b"] == 7 and out["token_requests:a"] == 100
