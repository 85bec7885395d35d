"""The split.yaml line reader gives what yaml.safe_load gives, or None (the YAML loader then reads the file)."""

from __future__ import annotations

import pytest
import yaml

from energon_arrow.meta.split import parse_split
from energon_arrow.meta.split_lines import parse_split_lines

# the layouts energon and prepare write: the reader must take them (not fall back)
FAST = [
    "split_parts:\n  train:\n  - shards/a.tar\n  - shards/b.tar\n  val: []\nexclude: []\n",
    "split_parts:\n  train:\n  - a.tar\n  val:\n  - b.tar\nexclude:\n- a.tar/k1\n- a.tar/x/y\n- b.tar\n",
    "split_parts:\n  train:\n  - shards/s-{000..009}.tar\nexclude:\n- shards/s-000.tar/k\n",  # no last newline
    "split_parts: {}\nexclude: []\n",
    "# written by hand\nsplit_parts:\n  train:\n  - a.tar\n\n  - b.tar\n# more\nexclude:\n- 'a.tar/it''s'\n- 'a.tar/é'\n",
    "split_parts:\n  train:\n  - a.tar\nexclude:\n- 'true'\n- x-1\n- '12'\n",
    "split_parts:\n  train:\n  - a.tar\nexclude:\n",
    '{"split_parts": {"train": ["a.tar"]}, "exclude": ["a.tar/k"]}',
]

# anything else: None, or the same as the YAML loader
ODD = [
    "split_parts:\n  train: [a.tar, b.tar]\nexclude: []\n",  # flow list
    "split_parts:\n  train:\n  - a.tar  # comment\nexclude: []\n",
    "split_parts:\n  train:\n  - a.tar\nexclude:\n- a.tar/k # c\n",
    "split_parts:\r\n  train:\r\n  - a.tar\r\nexclude:\r\n- a.tar/k\r\n",
    'split_parts:\n  train:\n  - "a.tar"\nexclude:\n- "a.tar/\\u00e9"\n',
    "split_parts:\n  train:\n  - a.tar\nexclude:\n- true\n- 12\n- null\n- 1e3\n",
    "split_parts:\n  train:\n    - a.tar\nexclude: []\n",  # indented sequence
    "split_parts:\n  train:\n  - a.tar\n  - b.tar\n  val:\n  - c.tar\nexclude:\n  - a.tar/k\n",
    "split_parts:\n  train:\n  - a.tar\nexclude:\n- a.tar/k: v\n",
    "split_parts:\n  train:\n  - a.tar\nexclude:\n- a.tar/k\n- - nested\n",
    "split_parts:\n  train:\n  - a.tar\nsplit_parts:\n  val: []\n",
    "split_parts:\n  train:\n  - a.tar\nexclude: []\n- a.tar/k\n",
    "split_parts:\n  12:\n  - a.tar\n",
    "split_parts:\n  train:\n  - 'a.tar\n  - b.tar\n",
    "split_parts:\n  train:\n  - a.tar\nexclude:\n- a.tar/&anchor\n- '*'\n",
    "split_parts:\n  train:\n  - a.tar\nexclude:\n- a.tar/é\n- 'a.tar/ü'\n",
    "- a.tar\n",
    "",
    "{flow: [a, b]}",
    "split_parts:\n  train:\n  - a.tar\n\texclude: []\n",
    "split_parts:\n  train:\n  - a.tar\nexclude:\n- a.tar/k\u2028- b.tar\n",
    "split_parts:\n  train:\n  - a.tar\nexclude:\n- a.tar/k\x85- b.tar\n",
]


@pytest.mark.parametrize("text", FAST)
def test_written_layouts_take_the_fast_path(text):
    assert parse_split_lines(text) == yaml.safe_load(text)


@pytest.mark.parametrize("text", ODD)
def test_other_input_matches_the_yaml_loader_or_falls_back(text):
    got = parse_split_lines(text)
    if got is not None:
        assert got == yaml.safe_load(text)


def test_many_entries_with_one_odd_line():
    """A long run of entries is checked by one regex kernel; a single odd line in it sends the file to YAML."""
    entries = [f"shards/s-{i // 100:04d}.tar/{i:06d}" for i in range(5000)]
    text = "split_parts:\n  train:\n  - shards/s-0000.tar\nexclude:\n" + "".join(f"- {e}\n" for e in entries)
    assert parse_split_lines(text)["exclude"] == entries
    odd = text.replace("- shards/s-0020.tar/002000\n", "- shards/s-0020.tar/002000 # why\n")
    assert parse_split_lines(odd) is None
    assert parse_split(odd).exclude == [*entries[:2000], "shards/s-0020.tar/002000", *entries[2001:]]
    quoted = text.replace("- shards/s-0020.tar/002000\n", "- 'shards/s-0020.tar/it''s'\n")
    assert parse_split_lines(quoted)["exclude"][2000] == "shards/s-0020.tar/it's"
