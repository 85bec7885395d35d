"""TaskEncoder's pipeline-building methods (energon's build_train_datasets / build_val_datasets / build_batch /
build_encode_sample / build_cook_crude_sample): their signatures, the pipelines they compose, and
get_train_dataset / get_val_dataset building through a task encoder that overrides them (pipeline loader),
while a task encoder that does not override them keeps the fast path."""

from __future__ import annotations

import inspect

import pytest

import energon_arrow as ea
from energon_arrow.energon.energon_dataset import EnergonDataset
from energon_arrow.energon.savable_loader import BasicLoader
from energon_arrow.energon.wrappers.savable_loader import PipelineLoader, SavablePipelineLoader
from energon_arrow.loader.errors import LoaderError

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

BUILDERS = (
    "build_train_datasets",
    "build_val_datasets",
    "build_batch",
    "build_encode_sample",
    "build_cook_crude_sample",
)


@ea.edataclass
class Text(ea.Sample):
    text: str


class TextTE(ea.DefaultTaskEncoder):
    decoder = None

    @ea.stateless
    def encode_sample(self, sample):
        return Text.derive_from(sample, text=sample.caption.decode())


class OwnPipeline(TextTE):
    """Overrides energon's build methods to drop every sample whose key ends in 7 and records the calls."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def build_encode_sample(self, dataset, *, worker_config):
        self.calls.append("build_encode_sample")
        kept = ea.FilterDataset(
            dataset, filter_fn=lambda s: not s.__key__.endswith("7"), worker_config=worker_config
        )
        return super().build_encode_sample(kept, worker_config=worker_config)

    def build_train_datasets(self, **kwargs):
        self.calls.append(("build_train_datasets", kwargs["batch_size"], kwargs["blend_mode"].name))
        return super().build_train_datasets(**kwargs)

    def build_val_datasets(self, **kwargs):
        self.calls.append(("build_val_datasets", kwargs["batch_size"], kwargs["limit"]))
        return super().build_val_datasets(**kwargs)


def test_signatures_match_energon():
    energon = pytest.importorskip("megatron.energon")
    for name in BUILDERS:
        ours = inspect.signature(getattr(ea.TaskEncoder, name))
        ref = inspect.signature(getattr(energon.TaskEncoder, name))
        assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == [
            (p.name, p.kind, p.default if p.name != "blend_mode" else None) for p in ref.parameters.values()
        ], name


def test_without_override_the_fast_path_is_kept(prepared_root):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = ea.get_train_dataset(prepared_root, worker_config=wc, batch_size=4, task_encoder=TextTE())
    assert isinstance(ds, EnergonDataset)
    assert isinstance(ea.get_loader(ds), BasicLoader)


@pytest.mark.parametrize("workers", [0, 2])
def test_overridden_train_pipeline_is_used(prepared_root, workers):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers)
    te = OwnPipeline()
    ds = ea.get_train_dataset(
        prepared_root, worker_config=wc, batch_size=4, shuffle_buffer_size=10, task_encoder=te
    )
    assert isinstance(ds, ea.SavableDataset)
    assert te.calls == [("build_train_datasets", 4, "NONE"), "build_encode_sample"]
    loader = ea.get_savable_loader(ds)
    assert isinstance(loader, SavablePipelineLoader)
    it = iter(loader)
    batches = [next(it) for _ in range(40)]  # > one epoch of the 120 train samples: it repeats
    keys = [k for b in batches for k in b.__key__]
    assert all(len(b.__key__) == 4 for b in batches) and not any(k.endswith("7") for k in keys)
    assert all(t.startswith("sample ") for b in batches for t in b.text)
    assert loader.can_restore_sample()
    again = loader.restore_sample(batches[5].__restore_key__)
    assert again.__key__ == batches[5].__key__ and again.text == batches[5].text


def test_overridden_val_pipeline_with_limit(prepared_root):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    te = OwnPipeline()
    ds = ea.get_val_dataset(prepared_root, worker_config=wc, batch_size=5, limit=3, task_encoder=te)
    assert te.calls[0] == ("build_val_datasets", 5, 3)
    loader = ea.get_loader(ds)
    assert isinstance(loader, PipelineLoader)
    first, second = list(loader), list(loader)
    assert len(first) == 3 and [b.__key__ for b in first] == [b.__key__ for b in second]
    full = ea.get_val_datasets(prepared_root, worker_config=wc, batch_size=5, task_encoder=OwnPipeline())
    ((pipeline, factory),) = full
    assert len(factory) == 40 and sum(len(b.__key__) for b in ea.get_loader(pipeline)) == 36


def test_build_batch_compositions(prepared_root):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    core = ea.get_dataset_from_config(
        prepared_root, split_part="val", training=False, worker_config=wc, decoder=None
    ).build()

    class Grouped(TextTE):
        def batch_group_criterion(self, sample):
            return int(sample.__key__[-1]) % 2, None

        def encode_batch(self, batch):
            return len(batch.text)

    te = Grouped()
    encoded = te.build_encode_sample(core, worker_config=wc)
    assert isinstance(encoded, ea.MapDataset)
    grouped = te.build_batch(encoded, batch_size=3, worker_config=wc)
    assert isinstance(grouped, ea.MapDataset) and isinstance(grouped.dataset, ea.GroupBatchDataset)
    assert set(ea.get_loader(grouped)) <= {1, 2, 3}
    assert TextTE().build_batch(encoded, batch_size=None, worker_config=wc) is encoded  # unbatched
    plain = type("Plain", (ea.TaskEncoder,), {})()
    assert plain.build_encode_sample(core, worker_config=wc) is core  # encode_sample not overridden
    # DefaultTaskEncoder's encode_sample converts types: energon maps it too
    assert isinstance(ea.DefaultTaskEncoder().build_encode_sample(core, worker_config=wc), ea.MapDataset)
    with pytest.raises(LoaderError, match="packing_buffer_size needs both"):
        te.build_batch(encoded, batch_size=3, packing_buffer_size=8, worker_config=wc)

    class Packing(TextTE):
        def select_samples_to_pack(self, samples):
            return [samples[i : i + 2] for i in range(0, len(samples), 2)]

        def pack_selected_samples(self, samples):
            return samples[0].derive_from(samples[0], text="+".join(s.text for s in samples))

        def batch(self, samples):
            return [s.text for s in samples]

    packed = Packing().build_batch(encoded, batch_size=2, packing_buffer_size=4, worker_config=wc)
    chain, ds = [], packed
    while ds is not None:
        chain.append(type(ds))
        ds = getattr(ds, "dataset", None)
    assert ea.PackingDataset in chain and chain.index(ea.BatchDataset) < chain.index(ea.PackingDataset)
    texts = [t for batch in ea.get_loader(packed) for t in batch]
    assert texts and all(t.count("+") == 1 for t in texts[:-1])  # pairs of samples, in buffers of 4
