"""Dataset.split equals what energon 7.4.1 iterates for the same split.yaml (order, exclusions, brace ranges)."""

from __future__ import annotations

import pytest

from energon_arrow.query import open_dataset
from tests.query.conftest import make_energon_dataset, write_split

pytestmark = pytest.mark.conformance

SPLITS = [
    "split_parts:\n  train:\n  - shards/shard-{000000..000002}.tar\n  val:\n  - shards/shard-000003.tar\nexclude: []\n",
    """split_parts:
  train:
  - shards/shard-{000001..000000}.tar
  - shards/shard-000003.tar
  val:
  - shards/shard-00000{1..2}.tar
exclude:
- shards/shard-000002.tar
- shards/shard-000000.tar/000000_0000{01,03,10}
- shards/shard-000003.tar/000003_00000{0..4}
- shards/shard-000003.tar/not_a_key
""",
]


@pytest.fixture
def energon_ds(tmp_path):
    return make_energon_dataset(str(tmp_path / "ds"))


def energon_keys(root: str, split: str) -> list[str]:
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = get_val_dataset(root, split_part=split, worker_config=wc, batch_size=None)
    return [sample.__key__ for sample in get_loader(ds)]


@pytest.mark.parametrize("split_yaml", SPLITS, ids=["plain", "reordered-excluded"])
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_split_keys_equal_energon_iteration(energon_ds, split_yaml):
    write_split(energon_ds, split_yaml)
    ds = open_dataset(energon_ds)
    for split in ("train", "val"):
        ours = ds.split(split).column("sample_key").to_pylist()
        assert ours == energon_keys(energon_ds, split)
        assert ours
