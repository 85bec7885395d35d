"""Brace expansion is energon's (the braceexpand package): same strings, same order, same refusals."""

from __future__ import annotations

import re

import pytest
from braceexpand import UnbalancedBracesError, braceexpand

from energon_arrow.meta import MetaError, expand_braces, parse_split, parse_split_parts
from energon_arrow.meta.braces import collapse_names

PATTERNS = [
    "plain.tar",
    "shards/shard-{000000..000011}.tar",
    "x{1..2}{a,b}",
    "{a,b{c,d}}e",
    "python{2.{5..7},3.{2,3}}",
    "s{9..11}",
    "{1..09}",
    "{07..10}",
    "{-01..2}",
    "{4..1}",
    "{2..-1}",
    "{10..1..3}",
    "{1..10..-3}",
    "{1..3..0}",
    "{a..e}",
    "{a..g..2}",
    "{e..a}",
    "{Z..a}",
    "{a..Z}",
    "index.html{,.backup}",
    "{,}",
    "{a}",
    "{}",
    "no{brace}",
    "}{",
    "a}b{c",
    r"a\{b\}.tar",
    r"{1\{2,3}",
    r"a\,b{c\,d,e}",
    r"a\\b{x,y}",
    r"shards/.*\.tar",
    r"shard-\d{3}",
    "{a,{b,{c,d}}}{1..2}",
    # one integer range (expand_braces' fast path): padding, descending, single, percent signs
    "shards/shard-{000000..006399}.tar",
    "x{0..010}",
    "x{00..5}",
    "s{09..11}y",
    "p{1..100}q",
    "{0..0}",
    "a{5..5}b",
    "a{12..7}",
    "%d{1..3}%s",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_same_expansion_as_braceexpand(pattern):
    assert expand_braces(pattern) == list(braceexpand(pattern))


UNBALANCED = ["a{b", "{1{2,3}", "a{b}}", r"a\{b,c}", "{{a,b}", "x{1..3"]


@pytest.mark.parametrize("pattern", UNBALANCED)
def test_unbalanced_is_refused_naming_the_pattern(pattern):
    with pytest.raises(UnbalancedBracesError):
        list(braceexpand(pattern))
    with pytest.raises(MetaError, match=re.escape(f"unbalanced braces in {pattern!r}")):
        expand_braces(pattern)


def test_split_yaml_entry_with_unbalanced_braces_names_the_file_and_split():
    text = "split_parts:\n  train:\n    - shards/shard-{000..003.tar\nexclude: []\n"
    with pytest.raises(
        MetaError, match=r"^ds/split.yaml: split_parts\['train'\]: unbalanced braces in 'shards/"
    ):
        parse_split(text, "ds/split.yaml")
    text = "split_parts:\n  train: [a.tar]\nexclude:\n  - a.tar/{k1,k2\n"
    with pytest.raises(MetaError, match=r"^ds/split.yaml: exclude: unbalanced braces in 'a.tar/\{k1,k2'"):
        parse_split(text, "ds/split.yaml")


def test_split_parts_option_with_unbalanced_braces_names_the_option():
    with pytest.raises(MetaError, match=r"^--split-parts 'train:shards/\{0,1': unbalanced braces"):
        parse_split_parts(["train:shards/{0,1"])


def test_collapsed_names_expand_back_with_braceexpand():
    names = [f"s/shard-{i:06d}.tar" for i in (0, 1, 2, 3, 5, 6, 9)] + [
        "x.tar",
        "a9.tar",
        "a10.tar",
        "a11.tar",
    ]
    assert [n for c in collapse_names(names) for n in braceexpand(c)] == names
