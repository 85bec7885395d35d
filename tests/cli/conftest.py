"""Fixtures of the CLI tests: the CLI run in-process, and a small dataset with broken samples."""

from __future__ import annotations

import pytest

from energon_arrow.testing.lint_data import write_lint_webdataset
from tests.reference import energon_prepare

# shard 0 sample 3: a JPEG cut short; shard 1 sample 5: JSON with a syntax error
BROKEN = {(0, 3): "jpg", (1, 5): "json"}
FIELD_MAP = '{"image": "jpg", "caption": "json[caption]"}'


@pytest.fixture(scope="session")
def broken_root(tmp_path_factory) -> str:
    """3 shards x 12 samples (real JPEG, txt, json), two broken parts, prepared by energon 7.4.1 with
    CaptioningSample {image: jpg, caption: json[caption]}; split 2 train shards : 1 val shard."""
    root = str(tmp_path_factory.mktemp("cli-broken") / "ds")
    write_lint_webdataset(root, shards=3, samples_per_shard=12, broken=BROKEN)
    energon_prepare(root, split_ratio="2,1,0", field_map=FIELD_MAP)
    return root


@pytest.fixture(scope="session")
def clean_root(tmp_path_factory) -> str:
    """2 shards x 6 good samples prepared by energon-arrow (CaptioningSample {image: jpg, caption: txt})."""
    from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
    from energon_arrow.meta import field_map_dataset, parse_split_ratio

    root = str(tmp_path_factory.mktemp("cli-clean") / "ds")
    write_lint_webdataset(root, shards=2, samples_per_shard=6)
    options = PrepareOptions(
        split_ratio=parse_split_ratio("1,1,0"),
        dataset_yaml=field_map_dataset("CaptioningSample", {"image": "jpg", "caption": "txt"}),
        num_workers=1,
    )
    prepare_dataset(root, options)
    return root
