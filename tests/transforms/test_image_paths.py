"""A dataset is data, not code: the image files its rows name stay under the dataset's
``image_base_path`` (unless ``allow_images_outside_base``), only http(s) URLs are passed
on, a file over the provider's per-image limit is refused before it is read, and
templates never execute a row's values (docs/security.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from mmirage_beam.config.loader import DatasetConfig, InputConfig, OutputConfig, config_from_dict
from mmirage_beam.errors import ConfigError, RequestBuildError
from mmirage_beam.images import DEFAULT_MAX_IMAGE_FILE_BYTES, load_image, resolve_image_path
from mmirage_beam.providers.anthropic.adapter import MAX_IMAGE_FILE_BYTES, AnthropicBatchAdapter
from mmirage_beam.records import SourceRow
from mmirage_beam.transforms.build import BuildRequests, ExtractInputs
from tests.conftest import IMAGES, REPO, base_config

TEN_GB = 10 * 1024**3


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """An image folder holding a real photograph, a folder, a symlink to a file inside
    and two symlinks leading out; a real photograph outside it."""
    folder = tmp_path / "images"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "rocket.jpg").write_bytes((IMAGES / "rocket.jpg").read_bytes())
    (tmp_path / "outside.png").write_bytes((IMAGES / "coffee.png").read_bytes())
    (folder / "inside_link.jpg").symlink_to(folder / "sub" / "rocket.jpg")
    (folder / "out_link.png").symlink_to(tmp_path / "outside.png")
    (folder / "out_dir").symlink_to(tmp_path, target_is_directory=True)
    return folder


def _run_extract(rows: list[dict], base: Path, allow: bool, loaded: list, invalid: list, **limits):
    """ExtractInputs over ``rows`` (input ``image``): asserts the (source_index, source)
    of the loaded images and the (source_index, input_name, reason fragment) of the
    invalid rows (a fragment matches when it occurs in the reason)."""
    ds = DatasetConfig(
        path="rows.jsonl", type="JSONL", image_base_path=str(base), allow_images_outside_base=allow
    )
    inputs = [InputConfig("image", "image", type="image")]

    def reasons_match(actual):
        got = sorted((i, n, r) for i, n, r in actual)
        want = sorted(invalid)
        assert [(i, n) for i, n, _ in got] == [(i, n) for i, n, _ in want], got
        for (_, _, reason), (i, _, fragment) in zip(got, want):
            assert fragment in reason, (i, fragment, reason)

    with BeamTestPipeline() as p:
        source = p | beam.Create([SourceRow(i, 0, r) for i, r in enumerate(rows)])
        out = source | ExtractInputs(inputs, [ds], **limits)
        ok = out.rows | "Ok" >> beam.Map(lambda e: (e.source_index, e.images[0]["source"]))
        bad = out.errors | "Bad" >> beam.Map(lambda e: (e.source_index, e.input_name, e.reason))
        assert_that(ok, equal_to(loaded), label="Loaded")
        assert_that(bad, reasons_match, label="Invalid")


def test_paths_stay_under_the_base_unless_the_config_allows_more(base, tmp_path):
    outside = str(tmp_path / "outside.png")
    values = [
        "sub/rocket.jpg",  # 0: relative, inside
        "sub/../sub/./rocket.jpg",  # 1: '..' that stays inside
        "inside_link.jpg",  # 2: a symlink to a file inside
        outside,  # 3: absolute
        "../outside.png",  # 4: '..' out of the base
        "out_link.png",  # 5: a symlink leading out
        "out_dir/outside.png",  # 6: through a symlinked folder
        "file://" + outside,  # 7: file:// URL
        "ftp://example.com/a.png",  # 8: another scheme
        "data:image/png;base64,iVBORw0KGgo=",  # 9: a data URI
        "https://example.com/a.png",  # 10: passed on
        "HTTP://example.com/b.png",  # 11: passed on (schemes are case-insensitive)
    ]
    rows = [{"image": v} for v in values]
    rocket = str(base / "sub" / "rocket.jpg")
    passed = [(10, values[10]), (11, values[11])]
    refused_schemes = [
        (7, "image", f"image 'file://{outside}' is a URL of scheme 'file'; only http(s) URLs"),
        (8, "image", "image 'ftp://example.com/a.png' is a URL of scheme 'ftp'"),
        (9, "image", "image 'data:image/png;base64,iVBORw0KGgo=' is a URL of scheme 'data'"),
    ]
    _run_extract(
        rows,
        base,
        False,
        loaded=[(0, rocket), (1, rocket), (2, str(base / "inside_link.jpg")), *passed],
        invalid=[
            (3, "image", f"image {outside!r} is an absolute path"),
            (4, "image", "image '../outside.png' climbs out of image_base_path"),
            (5, "image", "image 'out_link.png' leads out of image_base_path"),
            (6, "image", "image 'out_dir/outside.png' leads out of image_base_path"),
            *refused_schemes,
        ],
    )
    # allow_images_outside_base: true reads files anywhere; other schemes stay refused.
    _run_extract(
        rows,
        base,
        True,
        loaded=[
            (0, rocket),
            (1, rocket),
            (2, str(base / "inside_link.jpg")),
            (3, outside),
            (4, outside),
            (5, str(base / "out_link.png")),
            (6, str(base / "out_dir" / "outside.png")),
            *passed,
        ],
        invalid=refused_schemes,
    )
    # The messages say how to allow it, and name the symlink's target.
    with pytest.raises(RequestBuildError, match="allow_images_outside_base: true"):
        resolve_image_path(outside, str(base))
    with pytest.raises(RequestBuildError, match=f"through a symlink \\(to '{outside}'\\)"):
        resolve_image_path("out_link.png", str(base))


def test_a_10_gb_sparse_png_is_refused_without_being_read(tmp_path):
    """The size comes from the filesystem; nothing is read. Run in a process whose
    address space is capped at 3 GiB, so a regression fails there instead of taking
    the machine's memory."""
    huge = tmp_path / "images" / "huge.png"
    huge.parent.mkdir()
    subprocess.run(["truncate", "-s", str(TEN_GB), str(huge)], check=True)
    assert huge.stat().st_size == TEN_GB and huge.stat().st_blocks == 0  # sparse
    code = textwrap.dedent(
        f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (3 * 1024**3, 3 * 1024**3))
        from mmirage_beam.errors import RequestBuildError
        from mmirage_beam.images import load_image
        for limit in (None, 3_932_160):
            try:
                load_image("huge.png", {str(huge.parent)!r}, max_file_bytes=limit)
            except RequestBuildError as exc:
                print(exc)
            else:
                sys.exit("loaded")
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    default, anthropic = out.stdout.strip().splitlines()
    assert f"is {TEN_GB} bytes, over the 64 MiB" in default and "it was not read" in default
    assert str(huge) in default and "3932160" not in default
    assert f"is {TEN_GB} bytes, over" in anthropic


def test_the_providers_per_image_limit_is_checked_before_reading(base):
    # A file one byte over Anthropic's limit (5 MB of base64 = 3,932,160 bytes of file),
    # and one at the limit that is still read (and then refused as not an image).
    (base / "over.png").write_bytes(b"\0" * (MAX_IMAGE_FILE_BYTES + 1))
    (base / "at.png").write_bytes(b"\0" * MAX_IMAGE_FILE_BYTES)
    limits = {
        "max_image_file_bytes": AnthropicBatchAdapter.max_image_file_bytes,
        "image_file_limit": AnthropicBatchAdapter.image_file_limit,
    }
    assert MAX_IMAGE_FILE_BYTES * 4 // 3 == 5 * 1024 * 1024  # its base64 is exactly 5 MiB
    _run_extract(
        [{"image": "over.png"}, {"image": "at.png"}],
        base,
        False,
        loaded=[],
        invalid=[
            (0, "image", f"is {MAX_IMAGE_FILE_BYTES + 1} bytes, over Anthropic's 5 MB"),
            (1, "image", "is not a recognisable image"),  # read: it is within the limit
        ],
        **limits,
    )
    with pytest.raises(RequestBuildError, match="it was not read"):
        load_image("over.png", str(base), max_file_bytes=MAX_IMAGE_FILE_BYTES)
    assert DEFAULT_MAX_IMAGE_FILE_BYTES == 64 * 1024 * 1024


def test_resolve_image_path_on_a_storage_uri_base():
    assert resolve_image_path("a/b.png", "gs://bucket/imgs") == "gs://bucket/imgs/a/b.png"
    assert resolve_image_path("a/../b.png", "gs://bucket/imgs/") == "gs://bucket/imgs/b.png"
    with pytest.raises(RequestBuildError, match="climbs out"):
        resolve_image_path("../secret.png", "gs://bucket/imgs")
    with pytest.raises(RequestBuildError, match="is a URL of scheme 'gs'"):
        resolve_image_path("gs://other/x.png", "gs://bucket/imgs")
    assert resolve_image_path("gs://other/x.png", "gs://bucket/imgs", True) == "gs://other/x.png"
    assert resolve_image_path("photo:1.png", "/data") == "/data/photo:1.png"  # not a scheme


def test_allow_images_outside_base_is_validated_at_load(tmp_path):
    cfg = base_config(tmp_path)
    ds = cfg["loading_params"]["datasets"][0]
    ds["allow_images_outside_base"] = True
    assert config_from_dict(cfg).datasets[0].allow_images_outside_base is True
    del ds["allow_images_outside_base"]
    assert config_from_dict(cfg).datasets[0].allow_images_outside_base is False
    ds["allow_images_outside_base"] = "yes"
    with pytest.raises(ConfigError) as info:
        config_from_dict(cfg)
    assert info.value.key == "loading_params.datasets[0].allow_images_outside_base"
    assert "must be true or false" in info.value.message


def test_templates_never_execute_a_rows_values():
    """Values are data: a value that looks like Jinja2 is sent as the text it is, in the
    prompt and in the rendered output_schema."""
    from mmirage_beam.providers.openai.adapter import OpenAIBatchAdapter
    from mmirage_beam.providers.openai.config import OpenAIBatchConfig
    from mmirage_beam.transforms.render import SchemaRenderer

    hostile = [
        "{{ 7*7 }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{% for x in range(3) %}{{ x }}{% endfor %}",
        "{{ config }}{{ self }}{{ lipsum.__globals__ }}",
    ]
    ds = DatasetConfig(path="rows.jsonl", type="JSONL")
    inputs = [InputConfig("q", "q")]
    outputs = [OutputConfig("answer", "Q: {{ q }}")]
    expected = [(i, f"Q: {v}") for i, v in enumerate(hostile)]
    with BeamTestPipeline() as p:
        rows = p | beam.Create([SourceRow(i, 0, {"q": v}) for i, v in enumerate(hostile)])
        extracted = rows | ExtractInputs(inputs, [ds])
        built = extracted.rows | BuildRequests(
            outputs, [ds], OpenAIBatchAdapter, OpenAIBatchConfig(model="gpt-4.1-mini")
        )
        sent = built.requests | beam.Map(
            lambda r: (r.source_index, json.loads(r.line)["body"]["messages"][0]["content"])
        )
        assert_that(sent, equal_to(expected), label="SentAsText")
    renderer = SchemaRenderer({"q": "{{ q }}", "both": "{{ q }} / {{ answer }}"})
    for v in hostile:
        assert renderer.render({"q": v, "answer": v}) == {"q": v, "both": f"{v} / {v}"}
