"""URL parsing and glob matching (`**` spans directories)."""

from __future__ import annotations

import os

import pytest

from energon_arrow.adapters.urls import glob_to_regex, join_path, parse_url, resolve_dss_url


@pytest.mark.parametrize(
    "url, protocol, path, shown",
    [
        ("s3://bucket/a/b/", "s3", "bucket/a/b", "s3://bucket/a/b"),
        ("S3A://bucket", "s3", "bucket", "s3://bucket"),
        ("memory://x/y", "memory", "/x/y", "memory://x/y"),
        ("file:///tmp/x", "file", "/tmp/x", "/tmp/x"),
        ("/tmp/x/../y", "file", "/tmp/y", "/tmp/y"),
    ],
)
def test_parse_url(url, protocol, path, shown):
    p = parse_url(url)
    assert (p.protocol, p.path, p.url()) == (protocol, path, shown)


def test_relative_and_home_paths_become_absolute(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert parse_url("data").path == os.path.join(str(tmp_path), "data")
    assert parse_url("~/x").path == os.path.join(os.path.expanduser("~"), "x")


def test_dss_urls_name_the_dataset_cache(monkeypatch, tmp_path):
    """energon's dss://NAME@VERSION/PATH is $NVDATASET_CACHE_DIR/NAME/VERSION/PATH (energon's EPath layout)."""
    from energon_arrow.adapters import open_storage

    monkeypatch.delenv("NVDATASET_CACHE_DIR", raising=False)
    with pytest.raises(ValueError, match="set NVDATASET_CACHE_DIR"):
        resolve_dss_url("dss://laion@v2/train")
    monkeypatch.setenv("NVDATASET_CACHE_DIR", "s3://cache/")
    assert resolve_dss_url("dss://my@ds@v2/a//b/") == "s3://cache/my@ds/v2/a/b"
    with pytest.raises(ValueError, match="NAME@VERSION"):
        resolve_dss_url("dss://laion/train")
    monkeypatch.setenv("NVDATASET_CACHE_DIR", str(tmp_path))
    (tmp_path / "laion" / "v2" / "train").mkdir(parents=True)
    (tmp_path / "laion" / "v2" / "train" / "x.txt").write_text("x")
    assert open_storage("dss://laion@v2/train").read_bytes("x.txt") == b"x"


def test_join_path():
    assert join_path("bucket/p", "a/b") == "bucket/p/a/b"
    assert join_path("bucket/p/", "/a") == "bucket/p/a"
    assert join_path("bucket", "") == "bucket"
    assert join_path("", "a") == "a"


@pytest.mark.parametrize(
    "pattern, matches, rejects",
    [
        ("**/*.tar", ["a.tar", "x/a.tar", "x/y/z.tar"], ["a.tar.idx", "a_tar", "x/a.tarx"]),
        ("*.tar", ["a.tar"], ["x/a.tar"]),
        ("a/**", ["a/b", "a/b/c"], ["b/a", "ab"]),
        ("a/**/b.txt", ["a/b.txt", "a/x/b.txt", "a/x/y/b.txt"], ["a/xb.txt", "b.txt"]),
        ("shard_??.tar", ["shard_01.tar"], ["shard_1.tar", "shard_001.tar", "shard_/1.tar"]),
        ("[ab]*.json", ["a.json", "bz.json"], ["c.json"]),
        ("[!ab]*.json", ["c.json"], ["a.json"]),
        ("part[0-9].bin", ["part3.bin"], ["partx.bin"]),
        ("weird(1)+.tar", ["weird(1)+.tar"], ["weird1+.tar"]),
        ("unclosed[.tar", ["unclosed[.tar"], ["unclosedx.tar"]),
        (".nv-meta/*", [".nv-meta/index.sqlite"], [".nv-meta/a/b"]),
    ],
)
def test_glob(pattern, matches, rejects):
    regex = glob_to_regex(pattern)
    for m in matches:
        assert regex.match(m), (pattern, m)
    for r in rejects:
        assert not regex.match(r), (pattern, r)
