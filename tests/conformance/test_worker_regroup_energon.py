"""Batches formed per worker (packing, batch_group_criterion, unbatched, generator hooks) on energon 7.4.1 and on
energon-arrow, only the import switched, with several workers per rank: the same batches in the same order, and a
generator's outputs see the same batch and sample indices and random draws (energon/worker_regroup.py)."""

from __future__ import annotations

import random

import pytest

import energon_arrow as ea
from energon_arrow.testing.synthetic import write_webdataset
from tests.reference import energon_prepare

pytestmark = [
    pytest.mark.conformance,
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
]
energon = pytest.importorskip("megatron.energon")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("regroup-conf") / "ds")
    write_webdataset(path, shards=3, samples_per_shard=20, image_bytes=50)
    energon_prepare(path)
    return path


# samples go from the workers to the main process pickled: their classes live at module level
@ea.edataclass
class NumberedArrow(ea.Sample):
    seen: tuple


@energon.edataclass
class NumberedEnergon(energon.Sample):
    seen: tuple


def make_task_encoder(mod, kind: str):
    """A task encoder written against `mod` (megatron.energon or energon_arrow)."""
    numbered = NumberedArrow if mod is ea else NumberedEnergon

    def size(sample) -> int:
        return 1 + int(sample.__key__[-1]) % 3

    class Generator(mod.DefaultTaskEncoder):
        decoder = None

        @mod.stateless(restore_seeds=True)
        def encode_sample(self, sample):  # 1-3 outputs per sample
            for _ in range(size(sample)):
                seen = (self.current_batch_index, self.current_sample_index, random.randint(0, 999))
                yield numbered.derive_from(sample, seen=seen)

        def batch(self, samples):
            return [(s.__key__, s.seen) for s in samples]

    class Packing(mod.DefaultTaskEncoder):
        decoder = None

        def select_samples_to_pack(self, samples):  # consecutive groups of 1-3 samples
            groups, current = [], []
            for s in samples:
                current.append(s)
                if len(current) == size(s):
                    groups.append(current)
                    current = []
            return groups + ([current] if current else [])

        @mod.stateless
        def pack_selected_samples(self, samples):
            return numbered.derive_from(samples[0], seen=tuple(s.__key__ for s in samples))

        def batch(self, samples):
            return [s.seen for s in samples]

    class Grouping(mod.DefaultTaskEncoder):
        decoder = None

        def batch_group_criterion(self, sample):
            return size(sample), size(sample) + 1

        def batch(self, samples):
            return [s.__key__ for s in samples]

    return {"generator": Generator, "unbatched": Generator, "packing": Packing, "grouping": Grouping}[kind]()


def _plain(x):
    """Nested tuples; an unbatched sample as its key and what it saw (restore keys differ by design)."""
    if isinstance(x, (NumberedArrow, NumberedEnergon)):
        return x.__key__, _plain(x.seen)
    return tuple(_plain(v) for v in x) if isinstance(x, (list, tuple)) else x


def batches(mod, root, kind: str, mode: str, n: int = 60):
    wc = mod.WorkerConfig(rank=0, world_size=3, num_workers=3)
    kw = dict(worker_config=wc, task_encoder=make_task_encoder(mod, kind), batch_size=3)
    if kind in ("unbatched", "grouping"):
        kw["batch_size"] = None
    if kind == "packing":
        kw["packing_buffer_size"] = 5
    if mode == "train":
        ds = mod.get_train_dataset(
            root, shuffle_buffer_size=3, max_samples_per_sequence=4, repeat=False, **kw
        )
    else:
        ds = mod.get_val_dataset(root, **kw)
    out = []
    for batch in mod.get_loader(ds):
        out.append(_plain(batch))
        if len(out) == n:
            break
    return out


@pytest.mark.parametrize("mode", ["train", "val"])
@pytest.mark.parametrize("kind", ["generator", "unbatched", "packing", "grouping"])
def test_same_batches_with_workers(root, kind, mode):
    ours = batches(ea, root, kind, mode)
    assert ours and ours == batches(energon, root, kind, mode)
