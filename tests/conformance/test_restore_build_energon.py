"""The same script on energon 7.4.1 and on energon-arrow (only the import differs): a task encoder overriding
build_val_datasets yields energon's batches, and `loader.restore_sample(batch.__restore_key__)` returns, on both,
the batch that was yielded (same keys, same encoded values), for the default loader and for an overridden
pipeline. Restore keys themselves differ (they name each library's own positions)."""

from __future__ import annotations

import pytest

import energon_arrow as ea
from energon_arrow.testing.synthetic import write_webdataset
from tests.reference import energon_prepare

pytestmark = [pytest.mark.conformance, pytest.mark.filterwarnings("ignore:This DataLoader will create")]
energon = pytest.importorskip("megatron.energon")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("restore-conf") / "ds")
    write_webdataset(path, shards=3, samples_per_shard=20, image_bytes=50)
    energon_prepare(path)
    return path


def make_task_encoder(mod, own_pipeline: bool):
    class Words(mod.DefaultTaskEncoder):
        decoder = None

        @mod.stateless
        def encode_sample(self, sample):
            return mod.TextSample.derive_from(sample, text=sample.caption.decode().upper())

    class Own(Words):
        def build_val_datasets(self, *, datasets, worker_config, **kwargs):
            self.built = [len(d.dataset) for d in datasets]
            return super().build_val_datasets(datasets=list(datasets), worker_config=worker_config, **kwargs)

    return Own() if own_pipeline else Words()


def _run(mod, root, own_pipeline: bool, workers: int):
    wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    ds = mod.get_val_dataset(
        root, worker_config=wc, batch_size=7, task_encoder=make_task_encoder(mod, own_pipeline)
    )
    loader = mod.get_savable_loader(ds)
    batches = list(loader)
    assert loader.can_restore_sample()
    restored = [loader.restore_sample(b.__restore_key__) for b in reversed(batches)][::-1]
    as_values = [(tuple(b.__key__), tuple(b.text)) for b in batches]
    assert [(tuple(b.__key__), tuple(b.text)) for b in restored] == as_values
    return as_values


@pytest.mark.parametrize("own_pipeline", [False, True], ids=["default", "build_val_datasets"])
def test_val_batches_and_restored_batches_equal_energon(root, own_pipeline):
    ours = _run(ea, root, own_pipeline, workers=0)
    assert ours == _run(energon, root, own_pipeline, workers=0)


def test_overridden_pipeline_with_workers_equal_energon(root):
    ours = _run(ea, root, True, workers=2)
    assert ours == _run(energon, root, True, workers=2)
