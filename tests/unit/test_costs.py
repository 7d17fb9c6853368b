"""Token counts, prices and the cost summaries (mmirage_beam/costs/).

Reference values and where they come from:

- tiktoken 0.14.0, ``tiktoken_ext/openai_public.py``: the SHA-256 (``expected_hash``)
  of the ``cl100k_base`` and ``o200k_base`` vocabulary files.
- tiktoken 0.14.0, ``tests/test_encoding.py`` and ``tests/test_simple_public.py``:
  ``cl100k_base`` token ids of "hello world", "rer", "'rer", "today\\n ", " \\x850", "👍".
- OpenAI Cookbook, ``examples/How_to_count_tokens_with_tiktoken.ipynb`` (commit
  c81359cdc6744f001e40c08a192604c5113fdab3): the ids of "tiktoken is great!",
  "antidisestablishmentarianism", "2 + 2 = 4" and "お誕生日おめでとう" in ``cl100k_base``
  and ``o200k_base``, and the example conversation whose prompt tokens the API reports
  as 129 (gpt-3.5-turbo, gpt-4) and 124 (gpt-4o, gpt-4o-mini).
- OpenAI images and vision guide, "Calculating costs": 1024 x 1024 high = 765 tokens,
  2048 x 4096 high = 1105, any size low = 85 (gpt-4o); patch models: 1024 x 1024 = 1024
  patches, 1800 x 2400 = 1452 patches (x 1.62 for gpt-4.1-mini / gpt-5-mini).
- The GSM8K hand-checked sample: the first row's ``solution`` request of
  configs/gsm8k_openai.yaml, whose content tiktoken 0.14.0 (o200k_base, run offline on
  the vocabulary shipped by bpe-openai) encodes to 84 tokens; "user" is 1 token; plus
  3 per message and 3 for the reply = 91. The same tiktoken run gives 114,041 for all
  1,319 ``solution`` requests.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import yaml

from mmirage_beam.costs.prices import batch_price, price_table
from mmirage_beam.costs.report import batch_usage_line, estimate_lines, usage_lines
from mmirage_beam.costs.tokens import TokenCounter
from mmirage_beam.providers import tokens as t
from mmirage_beam.providers.anthropic.tokens import anthropic_image_tokens
from mmirage_beam.providers.openai.tokens import encoding_for_model, openai_image_tokens
from mmirage_beam.providers.tokens import count_text, load_encoding, vocabulary_file
from tests.conftest import GSM8K_JSONL, IMAGES, REPO, base_config, write_config

TIKTOKEN_HASHES = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}

# (text, encoding, ids): tiktoken's tests and the OpenAI Cookbook (module docstring).
VECTORS = [
    ("hello world", "cl100k_base", [15339, 1917]),
    ("rer", "cl100k_base", [38149]),
    ("'rer", "cl100k_base", [2351, 81]),
    ("today\n ", "cl100k_base", [31213, 198, 220]),
    ("today\n \n", "cl100k_base", [31213, 27907]),
    ("today\n  \n", "cl100k_base", [31213, 14211]),
    (" \x850", "cl100k_base", [220, 126, 227, 15]),
    ("👍", "cl100k_base", [9468, 239, 235]),
    ("tiktoken is great!", "cl100k_base", [83, 1609, 5963, 374, 2294, 0]),
    ("tiktoken is great!", "o200k_base", [83, 8251, 2488, 382, 2212, 0]),
    ("antidisestablishmentarianism", "cl100k_base", [519, 85342, 34500, 479, 8997, 2191]),
    ("antidisestablishmentarianism", "o200k_base", [493, 129901, 376, 160388, 21203, 2367]),
    ("2 + 2 = 4", "cl100k_base", [17, 489, 220, 17, 284, 220, 19]),
    ("2 + 2 = 4", "o200k_base", [17, 659, 220, 17, 314, 220, 19]),
    (
        "お誕生日おめでとう",
        "cl100k_base",
        [33334, 45918, 243, 21990, 9080, 33334, 62004, 16556, 78699],
    ),
    ("お誕生日おめでとう", "o200k_base", [8930, 9697, 243, 128225, 8930, 17693, 4344, 48669]),
]

COOKBOOK_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates "
        "corporate jargon into plain English.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "New synergies will help drive top-line growth.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on "
        "opportunities for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the "
        "client deliverable.",
    },
]


@pytest.mark.parametrize("encoding", sorted(TIKTOKEN_HASHES))
def test_bundled_vocabulary_is_tiktokens(encoding):
    """bpe-openai ships the very files tiktoken downloads (same SHA-256), so nothing is
    fetched at first use."""
    data = resources.files("bpe_openai").joinpath("data", f"{encoding}.tiktoken.gz")
    raw = gzip.decompress(data.read_bytes())
    assert hashlib.sha256(raw).hexdigest() == TIKTOKEN_HASHES[encoding]
    assert Path(vocabulary_file(encoding)).read_bytes() == data.read_bytes()


@pytest.mark.parametrize("text,encoding,ids", VECTORS)
def test_published_token_ids(text, encoding, ids):
    assert load_encoding(encoding).encode_ordinary(text) == ids
    assert count_text(text, encoding) == len(ids)


def test_a_vocabulary_that_is_not_tiktokens_is_refused(tmp_path, monkeypatch):
    from mmirage_beam.providers import tokens

    fake = tmp_path / "o200k_base.tiktoken.gz"
    fake.write_bytes(gzip.compress(b"aGVsbG8= 0\n"))
    monkeypatch.setattr(tokens, "vocabulary_file", lambda encoding: str(fake))
    with pytest.raises(ValueError, match="is not tiktoken's o200k_base"):
        tokens.load_encoding("o200k_base")


def test_counting_loads_tiktoken_not_the_bpe_openai_extension():
    """Only bpe-openai's data files are read: its native extension (about 70 MB of RSS
    on every worker) is never imported."""
    code = (
        "import sys\n"
        "from mmirage_beam.providers.tokens import count_text\n"
        "assert count_text('tiktoken is great!', 'o200k_base') == 6\n"
        "print(sorted(m for m in ('bpe_openai', 'tiktoken') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['tiktoken']"


def test_long_and_repetitive_text_is_counted():
    # tiktoken's test_large_repeated
    assert count_text("x" * 1_000_000, "o200k_base") > 0
    assert count_text("", "o200k_base") == 0


# -- counting in bounded pieces (benchmarks/bench_tokens.py measures time and memory) ---


def _gsm8k_text() -> str:
    with GSM8K_JSONL.open(encoding="utf-8") as f:
        rows = [json.loads(ln) for ln in f if ln.strip()]
    return "\n".join(f"{r['question']}\n{r['answer']}" for r in rows)


# Texts with many pieces: prose (the GSM8K rows: numbers, <<16-3-4=9>>, U+2019), CJK
# with its punctuation and no spaces, accents, contractions, emoji, tabs, CRLF, runs of
# spaces, and JSON without spaces.
_NORMAL_TEXTS = {
    "gsm8k": _gsm8k_text()[:200_000],
    "cjk": "我们今天去公园散步，天气很好。然后吃了午饭！你觉得怎么样？「好的」（括号）：冒号；"
    * 60,
    "mixed": (
        "Ünïcödé café naïve — “quotes” ‘single’ don't can't we're I'll 😀👍🏽 \u00a0nbsp\u3000"
        "ideo\t\ttabs\r\n\r\ncrlf  double  spaces   end. Next\nline: x=1;y=2 "
    )
    * 60,
    "json": json.dumps([{"q": "What is 2+2?", "a": [4, "four"], "ok": True}] * 300),
}


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
@pytest.mark.parametrize("name", sorted(_NORMAL_TEXTS))
def test_normal_text_counts_exactly_what_one_tiktoken_call_counts(name, encoding):
    text = _NORMAL_TEXTS[name]
    whole = len(load_encoding(encoding).encode_ordinary(text))
    for piece_chars in (32, 256, t.PIECE_CHARS):  # small pieces: thousands of cuts
        counted = t.text_tokens(text, encoding, piece_chars=piece_chars, run_chars=8)
        assert counted == t.TextTokens(whole, True), (name, piece_chars)
    assert count_text(text, encoding) == whole


def test_a_count_labelled_exact_is_the_exact_count_for_any_cut():
    """Seeded random texts over characters that meet at every kind of boundary, cut into
    pieces of every size: whenever the label says exact, the count is tiktoken's."""
    import random

    rng = random.Random(18)
    alphabet = list("ab XY1 2.,'!?\n\t-_/\\\"{}:;") + ["é", "’", "中", "。", "😀", "\u00a0"]
    alphabet += ["\u0301", "  ", "\r\n", "'s", "'t", "’s", "=>", "1234"]
    encoders = {e: load_encoding(e).encode_ordinary for e in ("o200k_base", "cl100k_base")}
    labelled_exact = 0
    for _ in range(1500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 120)))
        for encoding, encode in encoders.items():
            counted = t.text_tokens(text, encoding, piece_chars=rng.randint(1, 16), run_chars=1)
            if counted.exact:
                labelled_exact += 1
                assert counted.tokens == len(encode(text)), (encoding, text)
    assert labelled_exact > 500  # the property was exercised, not vacuous


def test_a_run_without_boundaries_is_cut_at_a_fixed_length_and_labelled(monkeypatch):
    seen: list[int] = []
    real = t._encoder("o200k_base")
    monkeypatch.setitem(t._ENCODERS, "o200k_base", lambda s: seen.append(len(s)) or real(s))
    run = "x" * 100_000
    counted = t.text_tokens(run, "o200k_base")
    assert counted == t.TextTokens(100_000 // 8, False)  # 8 x's a token, 512 = 64 * 8
    assert set(seen[:-1]) == {t.RUN_CHARS} and seen[-1] <= t.PIECE_CHARS  # the rest: whole
    seen.clear()
    blob = base64.b64encode(bytes(range(256)) * 400).decode()  # '+' and '/' in it
    prose = _NORMAL_TEXTS["gsm8k"]
    assert t.text_tokens(blob + " " + prose, "o200k_base").exact
    assert max(seen) <= t.PIECE_CHARS
    # A few pathological characters among prose: exact before and after, estimated where
    # the run is, and never more than one piece's worth of error per cut.
    text = prose[:50_000] + "=" * 30_000 + prose[:50_000]
    whole = len(real(text))
    counted = t.text_tokens(text, "o200k_base")
    assert not counted.exact and abs(counted.tokens - whole) <= 30_000 // t.RUN_CHARS + 1
    with pytest.raises(ValueError):
        t.text_tokens(run, "o200k_base", piece_chars=8, run_chars=9)


def test_a_request_with_a_cut_run_is_an_estimate_in_the_printed_summary():
    from mmirage_beam.providers.openai.config import OpenAIBatchConfig

    counter = TokenCounter("openai", "gpt-4.1-mini")
    line = {"custom_id": "a-text-0", "method": "POST", "url": "/v1/chat/completions"}
    words = {
        **line,
        "body": {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "Hi there."}]},
    }
    blob = {
        **line,
        "body": {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "y" * 20_000}]},
    }
    assert counter.count(words).exact
    estimated = counter.count(blob)
    assert not estimated.exact and any("without a space" in n for n in estimated.notes)
    counter.record("words", words)
    counter.record("blob", blob)
    text = "\n".join(
        estimate_lines(counter.pending_stats(), OpenAIBatchConfig(model="gpt-4.1-mini"))
    )
    assert "words: 1 request(s), input tokens" in text and "(exact)" in text
    assert f"blob: 1 request(s), input tokens {estimated.input_tokens:,} (estimate)" in text


@pytest.mark.parametrize(
    "model,encoding",
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-2024-08-06", "o200k_base"),
        ("gpt-4.1-mini", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-5-nano", "o200k_base"),
        ("o3", "o200k_base"),
        ("o4-mini-2025-04-16", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-0613", "cl100k_base"),
        ("gpt-3.5-turbo-0125", "cl100k_base"),
        ("ft:gpt-4o-mini:org::id", "o200k_base"),
        ("my-own-model", None),
    ],
)
def test_model_encodings(model, encoding):
    assert encoding_for_model(model) == encoding


@pytest.mark.parametrize(
    "model,expected",
    [("gpt-3.5-turbo", 129), ("gpt-4-0613", 129), ("gpt-4", 129), ("gpt-4o", 124)]
    + [("gpt-4o-mini", 124)],
)
def test_chat_overhead_matches_the_cookbooks_api_counts(model, expected):
    count = TokenCounter("openai").count({"body": {"model": model, "messages": COOKBOOK_MESSAGES}})
    assert count == t.TokenCount(expected, None, True, ())


def test_output_limit_and_estimate_labels():
    counter = TokenCounter("openai", "gpt-4.1-mini")
    body = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "Hi"}]}
    assert counter.count({"body": {**body, "max_completion_tokens": 50}}).max_output_tokens == 50
    schema = {
        "type": "json_schema",
        "json_schema": {"name": "x", "strict": True, "schema": {"type": "object"}},
    }
    with_schema = counter.count({"body": {**body, "response_format": schema}})
    plain = counter.count({"body": body})
    assert plain.exact and not with_schema.exact
    assert with_schema.input_tokens > plain.input_tokens
    assert any("response_format" in n for n in with_schema.notes)
    responses = counter.count(
        {"body": {"model": "gpt-4.1-mini", "input": "Hi", "max_output_tokens": 16}}
    )
    assert responses.max_output_tokens == 16 and not responses.exact
    unknown = TokenCounter("openai").count({"body": {**body, "model": "acme-1"}})
    assert not unknown.exact and "no known encoding" in unknown.notes[0]
    with pytest.raises(ValueError):
        counter.count(b'{"custom_id": "x"}')


def test_gsm8k_hand_checked_sample():
    row = json.loads(GSM8K_JSONL.read_text(encoding="utf-8").split("\n", 1)[0])
    prompt = (
        "Solve this grade-school maths problem step by step, then give the final number\n"
        "on its own line.\n\n" + row["question"]
    )
    line = json.dumps(
        {
            "custom_id": "solution-text-0",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": prompt}]},
        }
    ).encode()
    assert count_text(prompt, "o200k_base") == 84
    assert TokenCounter("openai", "gpt-4.1-mini").count(line) == t.TokenCount(91, None, True, ())


# --------------------------------------------------------------------------- images


@pytest.mark.parametrize(
    "model,size,detail,expected",
    [
        ("gpt-4o", (1024, 1024), "high", 765),
        ("gpt-4o", (2048, 4096), "high", 1105),
        ("gpt-4o", (4096, 8192), "low", 85),
        ("gpt-4o", (1024, 1024), "auto", 765),
        ("gpt-4.1-mini", (1024, 1024), "high", round(1024 * 1.62)),
        ("gpt-4.1-mini", (1800, 2400), "high", round(1452 * 1.62)),
        ("gpt-5-mini", (1800, 2400), "low", round(1452 * 1.62)),
        ("gpt-4.1-nano", (1024, 1024), "high", round(1024 * 2.46)),
        ("o1", (1024, 1024), "high", 75 + 150 * 4),
        ("gpt-5", (1024, 1024), "high", 70 + 140 * 4),
        ("gpt-4o-mini", (512, 512), "high", 2833 + 5667),
    ],
)
def test_openai_image_formula(model, size, detail, expected):
    assert openai_image_tokens(model, *size, detail=detail) == (expected, True)


def test_openai_image_of_unknown_model_or_size():
    assert openai_image_tokens("acme-vision", 512, 512, "high") == (85 + 170, False)
    assert openai_image_tokens("gpt-4o", None, None) == (85 + 170 * 8, True)


@pytest.mark.parametrize(
    "model,size,expected",
    [
        ("claude-haiku-4-5", (1092, 1092), 39 * 39),
        ("claude-haiku-4-5", (200, 200), 8 * 8),
        ("claude-haiku-4-5", (28, 29), 1 * 2),
        ("claude-haiku-4-5", (None, None), 1568),
        ("claude-opus-4-7", (None, None), 4784),
    ],
)
def test_anthropic_image_patches(model, size, expected):
    assert anthropic_image_tokens(model, *size) == expected


def test_anthropic_large_images_are_resized_to_the_native_resolution():
    for w, h in [(4000, 3000), (8000, 1000), (1568, 1568)]:
        n = anthropic_image_tokens("claude-haiku-4-5", w, h)
        assert 0.9 * 1568 < n <= 1568 or (w, h) == (8000, 1000)
        assert n <= 1568
    assert anthropic_image_tokens("claude-opus-4-7", 4000, 3000) <= 4784


@pytest.mark.parametrize("name", sorted(p.name for p in IMAGES.iterdir() if p.suffix != ".jsonl"))
def test_image_size_from_the_data_url_header(name):
    from PIL import Image

    raw = (IMAGES / name).read_bytes()
    with Image.open(io.BytesIO(raw)) as im:
        expected = im.size
    url = "data:image/x;base64," + base64.b64encode(raw).decode()
    assert t.image_size_from_url(url) == expected
    assert t.image_size_from_url("https://example.org/a.png") is None


def test_multimodal_requests_count_their_images():
    raw = (IMAGES / "chelsea.png").read_bytes()  # 451 x 300
    url = "data:image/png;base64," + base64.b64encode(raw).decode()
    parts = [
        {"type": "text", "text": "What is it?"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": parts}]}
    count = TokenCounter("openai").count({"body": body})
    text_only = 3 + count_text("user", "o200k_base") + count_text("What is it?", "o200k_base") + 3
    assert count.input_tokens == text_only + 85 + 170  # 451 x 300: one 512 px tile
    assert not count.exact
    params = {
        "model": "claude-haiku-4-5",
        "max_tokens": 10,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is it?"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": url[22:]},
                    },
                ],
            }
        ],
    }
    an = TokenCounter("anthropic").count({"custom_id": "a", "params": params})
    assert an.input_tokens == 3 + count_text("What is it?", "cl100k_base") + 17 * 11
    assert an.max_output_tokens == 10 and not an.exact


# --------------------------------------------------------------------------- prices


def test_price_table_rows_are_dated_and_sourced():
    table = price_table()
    for row in table["models"]:
        assert row["official_page"].startswith("https://") and row["read_at"] and row["checked"]
        assert row["input"] >= 0 and row["output"] >= 0
    assert table["batch_discount"]["openai"]["fraction"] == 0.5


def test_batch_price_overrides_and_unknown_models():
    from mmirage_beam.providers.openai import OpenAIBatchConfig

    p = batch_price("openai", "gpt-4.1-mini")
    assert (p.input_per_million, p.output_per_million) == (0.2, 0.8)
    assert batch_price("openai", "gpt-4.1-mini-2025-04-14") == p
    assert batch_price("openai", "gpt-4.1-minimal") is None
    assert batch_price("openai", "acme-1") is None
    cfg = OpenAIBatchConfig(
        model="acme-1", price_per_million_input_tokens=1, price_per_million_output_tokens=2
    )
    assert batch_price("openai", "acme-1", cfg)[:2] == (1.0, 2.0)
    assert p.cost_usd(1_000_000, 500_000) == pytest.approx(0.6)


@pytest.mark.parametrize(
    "key,value,message",
    [
        ("price_per_million_input_tokens", "cheap", "must be a number"),
        ("price_per_million_output_tokens", -1, "must be >= 0"),
        ("max_enqueued_tokens", 0, "must be >= 1"),
        ("max_enqueued_tokens", 1.5, "must be an integer"),
        ("exact_tokens", "yes", "true or false"),
    ],
)
def test_bad_cost_keys_are_config_errors_naming_the_key(tmp_path, key, value, message):
    from mmirage_beam.config import load_config
    from mmirage_beam.errors import ConfigError

    path = write_config(tmp_path, base_config(tmp_path, **{key: value}))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.key == f"processors[0].{key}" and message in info.value.message


def test_summaries_say_exact_estimate_and_price_unknown():
    from mmirage_beam.providers.openai import OpenAIBatchConfig

    stats = {
        "input_tokens:a": 100,
        "token_requests:a": 2,
        "max_output_tokens:a": 40,
        "input_tokens:b": 300,
        "input_tokens_estimated:b": 300,
        "token_requests:b": 3,
        "token_requests_estimated:b": 3,
        "requests_without_output_limit:b": 3,
    }
    lines = estimate_lines(stats, OpenAIBatchConfig(model="gpt-4.1-mini", max_enqueued_tokens=350))
    text = "\n".join(lines)
    assert "a: 2 request(s), input tokens 100 (exact), output tokens at most 40" in text
    assert "b: 3 request(s), input tokens 300 (estimate), output tokens no upper bound" in text
    assert "total: 5 request(s), input tokens 400 (100 exact + 300 estimated)" in text
    assert "up to $0.0001" in text and "exceed max_enqueued_tokens (350)" in text
    unknown = "\n".join(estimate_lines(stats, OpenAIBatchConfig(model="acme-1")))
    assert "price unknown for 'acme-1'" in unknown and "cost price unknown" in unknown
    used = usage_lines(
        {"used_input_tokens:a": 1_000_000, "used_output_tokens:a": 1_000_000},
        OpenAIBatchConfig(model="gpt-4.1-mini"),
    )
    assert used[-1] == "  a: input tokens 1,000,000, output tokens 1,000,000, cost $1.00"
    assert batch_usage_line({"input_tokens": 5, "output_tokens": 2}).startswith("5 input + 2")
    assert batch_usage_line(None) is None


# ------------------------------------------------------------------ the dry run itself


def _bundled_gsm8k_config(tmp_path: Path) -> str:
    cfg = yaml.safe_load((REPO / "configs" / "gsm8k_openai.yaml").read_text(encoding="utf-8"))
    proc = cfg["processors"][0]
    proc["metadata_output_path"] = str(tmp_path / "meta" / "batch_metadata.jsonl")
    proc.pop("base_url", None)
    cfg["loading_params"]["state_dir"] = str(tmp_path / "state")
    for ds in cfg["loading_params"]["datasets"]:
        ds["path"] = str(REPO / ds["path"])
        ds["output_dir"] = str(tmp_path / "shards")
    return write_config(tmp_path, cfg)


def test_bundled_gsm8k_dry_run_prints_tokens_and_cost(tmp_path, capsys):
    """Done means: the bundled config's dry run prints tokens and estimated cost; the
    exact count is tiktoken's (114,041 for the 1,319 solution requests)."""
    from pipelines.submit import main as run_main

    path = _bundled_gsm8k_config(tmp_path)
    assert run_main(["--config", path, "--export-prompts", str(tmp_path / "p.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "tokens and estimated cost:" in out
    assert "batch price gpt-4.1-mini: $0.2 in / $0.8 out per million tokens" in out
    assert "solution: 1,319 request(s), input tokens 114,041 (exact)" in out
    assert "grading: 1,319 request(s), input tokens" in out and "(estimate)" in out
    assert "total: 2,638 request(s), input tokens" in out
    # The exported first request is the hand-checked sample.
    export = next(tmp_path.glob("p.*.jsonl"))
    lines = [json.loads(x)["request"] for x in export.read_text(encoding="utf-8").split("\n") if x]
    (first,) = [r for r in lines if r["custom_id"] == "solution-text-0"]
    assert TokenCounter("openai").count(first).input_tokens == 91


# ------------------------------------------------------------------- the token budget


def _chunk(tmp_path: Path, n: int, text: str = "Count these words please"):
    """A staged chunk (:class:`ChunkRef`) of ``n`` plain OpenAI requests."""
    from mmirage_beam.records import ChunkRef

    lines = [
        json.dumps(
            {
                "custom_id": f"a-text-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": text}]},
            }
        ).encode()
        + b"\n"
        for i in range(n)
    ]
    path = tmp_path / f"staged-{n}.jsonl"
    path.write_bytes(b"".join(lines))
    size = sum(map(len, lines))
    return ChunkRef(f"a-chunk-{n:06d}", "a", "text", str(path), n, size, "", False, "end_of_input")


def test_token_budget_waits_for_unfinished_batches_and_stops_on_request(tmp_path, fake_provider):
    """Against the fake through the real adapter: a batch still running holds its tokens;
    the wait calls the stop check (which raises) instead of sleeping forever; a chunk
    above the limit alone goes once nothing is enqueued."""
    from mmirage_beam.errors import RunStopped
    from mmirage_beam.io.fs import write_durably
    from mmirage_beam.providers.openai import OpenAIBatchConfig
    from mmirage_beam.providers.openai.adapter import OpenAIBatchAdapter
    from mmirage_beam.run.budget import TokenBudget
    from mmirage_beam.run.layout import part_path
    from mmirage_beam.run.receipts import receipt_path

    fake_provider.script(processing_delay_secs=600)
    config = OpenAIBatchConfig(base_url=fake_provider.openai_base_url, max_enqueued_tokens=100)
    adapter = OpenAIBatchAdapter({"api_key": "sk-test"})
    adapter.setup(config)
    chunk = _chunk(tmp_path, 4)  # 4 x (3 + 1 + 4 + 3) = 44 tokens
    sleeps: list[float] = []
    budget = TokenBudget(100, config, str(tmp_path / "m"), "r1", 0.01, sleep=sleeps.append)
    assert budget.chunk_tokens(chunk) == 44
    assert budget.wait_for_token_budget(chunk, adapter) == 44 and not sleeps  # nothing enqueued

    batch_id = adapter.submit_staged_chunk(chunk.chunk_id, chunk.path, config).batch_id
    rfile = receipt_path(str(tmp_path / "m"), "text", "r1")
    write_durably(
        part_path(rfile, "a-chunk-000000"),
        json.dumps(
            {
                "chunk_id": "a-chunk-000000",
                "provider_batch_id": batch_id,
                "input_tokens_estimate": 80,
            }
        ).encode(),
    )
    assert budget.enqueued_tokens(adapter) == 80

    def stop() -> None:
        raise RunStopped("stop requested")

    with pytest.raises(RunStopped):
        budget.wait_for_token_budget(chunk, adapter, stop)  # 80 + 44 > 100
    big = _chunk(tmp_path, 10)  # 110 tokens: above the limit on its own
    with pytest.raises(RunStopped):
        budget.wait_for_token_budget(big, adapter, stop)
    other_run = TokenBudget(100, config, str(tmp_path / "m"), "r2", 0.01, sleep=sleeps.append)
    assert other_run.wait_for_token_budget(big, adapter, stop) == 110  # alone: it goes
    assert not sleeps
    adapter.teardown()


def test_a_sampled_cost_says_it_is_the_95_percent_upper_bound_even_without_output_limit():
    """Issue 38: a sampled estimate's cost is priced at the 95% upper bound of its input
    tokens; the line said so only when every request set an output limit."""
    from mmirage_beam.costs.tokens import INPUT_TOKENS_SQUARES, REQUESTS_NOT_SAMPLED
    from mmirage_beam.providers.openai import OpenAIBatchConfig

    stats = {
        "input_tokens:c": 300,
        f"{INPUT_TOKENS_SQUARES}:c": 100**2 + 90**2 + 110**2,
        "token_requests:c": 10,
        f"{REQUESTS_NOT_SAMPLED}:c": 7,
        "requests_without_output_limit:c": 10,
    }
    text = "\n".join(estimate_lines(stats, OpenAIBatchConfig(model="gpt-4.1-mini")))
    line = next(x for x in text.splitlines() if x.startswith("  c: "))
    assert "output unbounded" in line and "at the 95% upper bound" in line, line


def test_openai_cached_and_reasoning_tokens_are_kept_and_priced():
    """Issue 38: OpenAI's ``cached_tokens`` and ``reasoning_tokens`` were dropped from
    the merged usage, and the cost ignored the cached-input price. Result lines as the
    API writes them (chat ``CompletionUsage``, Responses ``ResponseUsage``) keep both;
    the merge's cost prices the cached part of the input at the cached-input price."""
    from mmirage_beam.providers.openai import OpenAIBatchConfig
    from mmirage_beam.providers.openai.adapter import normalise_result_line
    from mmirage_beam.transforms.fetch import CACHE_TOKEN_FIELDS

    chat = {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}}],
        "usage": {
            "prompt_tokens": 1200,
            "completion_tokens": 300,
            "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 256, "audio_tokens": 0},
        },
    }
    responses = {
        "object": "response",
        "status": "completed",
        "output": [
            {"type": "message", "content": [{"type": "output_text", "text": "4"}]},
        ],
        "usage": {
            "input_tokens": 1200,
            "output_tokens": 300,
            "input_tokens_details": {"cached_tokens": 1024},
            "output_tokens_details": {"reasoning_tokens": 256},
        },
    }
    for body in (chat, responses):
        line = {"custom_id": "c", "response": {"status_code": 200, "body": body}, "error": None}
        r = normalise_result_line(line)
        assert r.generated_text == "4" and (r.input_tokens, r.output_tokens) == (1200, 300)
        assert (r.cached_input_tokens, r.reasoning_tokens) == (1024, 256)
        assert r.to_json()["cached_input_tokens"] == 1024
        kept = {k: getattr(r, k) for k in CACHE_TOKEN_FIELDS if getattr(r, k)}
        assert kept == {"cached_input_tokens": 1024, "reasoning_tokens": 256}

    stats = {
        "used_input_tokens:a": 1_000_000,
        "used_output_tokens:a": 0,
        "used_cached_input_tokens:a": 800_000,
        "used_reasoning_tokens:a": 0,
    }
    used = usage_lines(stats, OpenAIBatchConfig(model="gpt-4.1-mini"))
    # 200,000 at the batch input price ($0.20/M) + 800,000 cached at $0.05/M
    assert used[-1] == (
        "  a: input tokens 1,000,000, output tokens 0, of which cached input 800,000, cost $0.0800"
    ), used
    # a model whose cached price is not in the table: priced as input, never less
    uncached = usage_lines(stats, OpenAIBatchConfig(model="gpt-4o"))
    assert uncached[-1].endswith("cost $1.25"), uncached
