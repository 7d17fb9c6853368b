"""Why an input is missing: a typo'd YAML key (top-level or dotted) names the nearest key
where the path broke; a null value or a field of a non-object stays "missing or null"."""

from __future__ import annotations

import pytest

from mmirage_beam.transforms.extract import _missing

ROW = {"question": "q", "meta": {"stars": 3, "tags": None}, "n": 1}


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("questoin", "is missing: the row has no key 'questoin' (did you mean 'question'?)"),
        ("meta.strs", "is missing: the row has no key 'meta.strs' (did you mean 'meta.stars'?)"),
        ("zzz", "is missing: the row has no key 'zzz' (its keys: 'meta', 'n', 'question')"),
        ("meta.zzz", "is missing: the row has no key 'meta.zzz' (keys of 'meta': 'stars', 'tags')"),
        ("meta.tags", "is missing or null"),  # present, null: the row's own value
        ("n.x", "is missing or null"),  # a field of a number: not a key typo
        ("meta[0]", "is missing or null"),  # a JMESPath expression: not judged
    ],
)
def test_the_reason_names_the_nearest_key(key, reason):
    assert _missing(ROW, key) == reason
