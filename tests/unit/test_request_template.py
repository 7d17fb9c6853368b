"""Request templates (mmirage_beam/transforms/request_template.py): every text request a
template splices is byte for byte the request its dict encodes to, for every provider
and output of the shipped configs and the real GSM8K rows, and an adapter whose requests
are not templates gets none."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmirage_beam.config.validation import config_from_dict
from mmirage_beam.jsonl import json_encoder
from mmirage_beam.providers.base import BatchAdapterRegistry
from mmirage_beam.providers.openai.adapter import OpenAIBatchAdapter
from mmirage_beam.records import SourceRow
from mmirage_beam.transforms.build import BuildRequests, _BuildRequestsFn, build_payload
from mmirage_beam.transforms.extract import ExtractInputs
from mmirage_beam.transforms.request_template import RequestTemplate
from tests.conftest import REPO

CONFIGS = sorted((REPO / "configs").glob("gsm8k_*.yaml"))
#: the OpenAI config as the other OpenAI-shaped providers and endpoints
VARIANTS = [
    ("together", {}),
    ("groq", {}),
    ("azure-openai", {"base_url": "https://x.openai.azure.com/openai/v1"}),
    ("openai", {"batch_endpoint": "/v1/responses"}),
    ("openai", {"max_tokens": 300, "temperature": 0.5, "top_p": 0.9}),
]
#: prompts no GSM8K row has: every JSON escape, non-ASCII, U+2028, long
ODD_PROMPTS = [
    'quote " backslash \\ slash / tab \t cr \r nl \n bell \x07 nul \x00',
    "é ü 漢字 🙂 \u2028 \u2029 \ufeff",
    "x" * 100_000,
    " leading and trailing ",
]


def _configs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in CONFIGS:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        out.append((path.name, raw))
        if path.name == "gsm8k_openai.yaml":
            for provider, extra in VARIANTS:
                r = copy.deepcopy(raw)
                r["processors"][0].update(provider=provider, **extra)
                out.append((f"{path.name}:{provider}:{sorted(extra)}", r))
    return out


def _plain(outputs: Any) -> list[Any]:
    """Outputs as comparable values (a TaggedOutput as its tag and value)."""
    return [(o.tag, o.value) if hasattr(o, "tag") else o for o in outputs]


def _fns(raw: dict[str, Any]) -> tuple[Any, _BuildRequestsFn, _BuildRequestsFn]:
    raw = copy.deepcopy(raw)
    for ds in raw["loading_params"]["datasets"]:
        ds["path"] = str((REPO / ds["path"]).resolve())
    cfg = config_from_dict(raw)
    adapter_cls = BatchAdapterRegistry.get(cfg.processor.provider)
    fns = []
    for spliced in (True, False):
        fn = BuildRequests(cfg.outputs, cfg.datasets, adapter_cls, cfg.processor, False)._fn
        fn.setup()
        if not spliced:
            fn._request_templates = {}
        fn.start_bundle()
        fns.append(fn)
    return cfg, fns[0], fns[1]


@pytest.mark.parametrize("name, raw", _configs(), ids=[n for n, _ in _configs()])
def test_spliced_requests_equal_encoded_ones(name: str, raw: dict[str, Any]) -> None:
    cfg, spliced, encoded = _fns(raw)
    if BatchAdapterRegistry.get(cfg.processor.provider).verbatim_prompt:
        assert spliced._request_templates, name
        assert all(t is not None for t in spliced._request_templates.values()), name
    else:  # e.g. Bedrock's recordId is the custom_id escaped: no template may stand for it
        assert not any(spliced._request_templates.values()), name
    extract = ExtractInputs(cfg.inputs, cfg.datasets)._fn
    extract.setup()
    extract.start_bundle()
    lines = Path(cfg.datasets[0].path).read_text(encoding="utf-8").splitlines()[:300]
    rows = [json.loads(line) for line in lines]
    for odd in ODD_PROMPTS:  # through the inputs, so every output's prompt holds it
        rows.append({k: odd if isinstance(v, str) else v for k, v in rows[0].items()})
    checked = 0
    for i, row in enumerate(rows):
        for element in extract.process(SourceRow(i, 0, row)):
            got = _plain(spliced.process(element))
            want = _plain(encoded.process(element))
            assert got == want, (name, i)
            requests = [r for r in got if hasattr(r, "canonical")]
            assert all(r.canonical is not None for r in requests)
            checked += len(requests)
    assert checked >= len(rows) * len(cfg.outputs)


class _NotVerbatim(OpenAIBatchAdapter):
    """Puts a prompt-derived value into the request: no template may stand for it."""

    verbatim_prompt = True

    def build_request(self, custom_id: str, payload: dict, config: Any) -> dict:
        request = super().build_request(custom_id, payload, config)
        text = payload["messages"][0]["content"]
        request["body"]["metadata"] = {"chars": len(text)}
        return request


class _Prefixed(OpenAIBatchAdapter):
    verbatim_prompt = True

    def build_request(self, custom_id: str, payload: dict, config: Any) -> dict:
        request = super().build_request(custom_id, payload, config)
        request["body"]["messages"][0]["content"] = "System: " + payload["messages"][0]["content"]
        return request


@pytest.mark.parametrize("adapter_cls", [_NotVerbatim, _Prefixed])
def test_no_template_for_requests_that_are_not_templates(adapter_cls: type) -> None:
    raw = yaml.safe_load((REPO / "configs" / "gsm8k_openai.yaml").read_text(encoding="utf-8"))
    cfg = config_from_dict(raw)
    adapter = adapter_cls()
    output = cfg.outputs[0]

    def build(cid: str, prompt: str) -> dict:
        return adapter.build_request(cid, build_payload(prompt, (), output, None), cfg.processor)

    canonical = json_encoder(sort_keys=True, separators=(",", ":"))
    assert RequestTemplate.probe(build, adapter.serialize_request, canonical) is None
    # while the adapter it extends has one
    base = OpenAIBatchAdapter()

    def build_base(cid: str, prompt: str) -> dict:
        return base.build_request(cid, build_payload(prompt, (), output, None), cfg.processor)

    assert RequestTemplate.probe(build_base, base.serialize_request, canonical) is not None


def test_adapters_not_saying_so_get_no_template() -> None:
    class Quiet(OpenAIBatchAdapter):
        verbatim_prompt = False

    raw = yaml.safe_load((REPO / "configs" / "gsm8k_openai.yaml").read_text(encoding="utf-8"))
    cfg = config_from_dict(raw)
    fn = BuildRequests(cfg.outputs, cfg.datasets, Quiet, cfg.processor, False)._fn
    fn.setup()
    assert fn._request_templates == {}


def test_json_string_bytes_is_the_json_modules_escaping() -> None:
    import random
    from json.encoder import encode_basestring, encode_basestring_ascii

    from mmirage_beam.transforms.request_template import json_string_bytes

    every = [chr(c) for c in range(0x800)] + ["\u2028", "\u2029", "\ufeff", "🙂", "漢"]
    rng = random.Random(7)
    samples = every + [
        "".join(rng.choice(every) for _ in range(rng.randrange(0, 40))) for _ in range(3000)
    ]
    samples += ['a"b\\c\nd\re\tf', "plain ascii", "", 'é\n"x"', "\x7f", "\x08\x0c"]
    for s in samples:
        want = (encode_basestring(s).encode("utf-8"), encode_basestring_ascii(s).encode("ascii"))
        assert json_string_bytes(s) == want, repr(s)
