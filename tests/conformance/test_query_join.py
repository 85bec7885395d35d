"""energon `join:` metadatasets: our join equals the join index energon 7.4.1 builds for the same datasets."""

from __future__ import annotations

import glob

import numpy as np
import pytest

from energon_arrow.query import open_dataset
from energon_arrow.query.join import JoinMember, join_datasets, join_index_bytes
from tests.query.conftest import make_energon_dataset, write_split

pytestmark = pytest.mark.conformance

PRIMARY_SPLIT = """split_parts:
  train:
  - shards/shard-000002.tar
  - shards/shard-{000000..000001}.tar
  - shards/shard-000003.tar
  val: []
exclude:
- shards/shard-000001.tar
- shards/shard-000000.tar/000000_00000{2,5}
"""
A_SPLIT = "split_parts:\n  train:\n  - shards/shard-000001.tar\n  - shards/shard-000000.tar\n  - shards/shard-000002.tar\nexclude: []\n"
B_SPLIT = """split_parts:
  train:
  - shards/shard-{000000..000002}.tar
exclude:
- shards/shard-000002.tar/000002_00000{0..3}
"""


def energon_join_index(tmp_path, members: dict[str, tuple[str, str]]) -> bytes:
    from megatron.energon.epathlib import EPath
    from megatron.energon.metadataset.loader import prepare_metadataset

    lines = ["__module__: megatron.energon", "__class__: MetadatasetV2", "splits:", "  train:", "    join:"]
    for name, (path, nonmatch) in members.items():
        lines += [f"      {name}:", f"        path: {path}", f"        nonmatch: {nonmatch}"]
    lines += ["    joiner:", "      __module__: megatron.energon", "      __class__: TextSample"]
    mds = tmp_path / "joined.yaml"
    mds.write_text("\n".join(lines) + "\n")
    prepare_metadataset(EPath(str(mds)))
    (index,) = glob.glob(str(tmp_path / "joined.yaml.cache" / "join_index_*.bin"))
    with open(index, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def join_inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("join")
    primary = make_energon_dataset(str(root / "primary"), shards=4, samples=8, seed=0)
    write_split(primary, PRIMARY_SPLIT)
    a = make_energon_dataset(str(root / "a"), shards=3, samples=8, seed=1, image_bytes=700)
    write_split(a, A_SPLIT)
    b = make_energon_dataset(str(root / "b"), shards=3, samples=8, seed=2, image_bytes=1500)
    write_split(b, B_SPLIT)
    return primary, a, b


@pytest.mark.parametrize("a_nonmatch,b_nonmatch", [("none", "skip"), ("none", "none"), ("skip", "skip")])
def test_join_equals_energon_join_index(join_inputs, tmp_path, a_nonmatch, b_nonmatch):
    primary, a, b = join_inputs
    theirs = energon_join_index(
        tmp_path, {"primary": (primary, "error"), "a": (a, a_nonmatch), "b": (b, b_nonmatch)}
    )
    joined = join_datasets(
        {
            "primary": open_dataset(primary),
            "a": JoinMember(open_dataset(a), a_nonmatch),
            "b": JoinMember(open_dataset(b), b_nonmatch),
        },
        "train",
    )
    ours = join_index_bytes(joined, ["primary", "a", "b"])
    assert joined.num_rows > 0
    rows = np.frombuffer(theirs[16:], "<i8").reshape(-1, 9)
    assert np.frombuffer(ours[16:], "<i8").reshape(-1, 9).tolist() == rows.tolist()
    assert ours == theirs


def test_nonmatch_error_like_energon(join_inputs, tmp_path):
    primary, a, _ = join_inputs
    with pytest.raises(ValueError, match="missing"):
        energon_join_index(tmp_path, {"primary": (primary, "error"), "a": (a, "error")})
    with pytest.raises(ValueError, match=r"sample key '000003_000000' of 'primary' is missing from 'a'"):
        join_datasets({"primary": open_dataset(primary), "a": open_dataset(a)}, "train")
