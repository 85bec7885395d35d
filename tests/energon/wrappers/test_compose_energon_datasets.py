"""energon's wrappers compose what get_train_dataset / get_val_dataset return (as energon's do): the dataset is
replaced by energon's savable pipeline with the same arguments, which iterates, has a len() and saves/restores."""

from __future__ import annotations

import itertools

import energon_arrow as ea
from tests.energon.wrappers.conftest import keys_of, wc
from tests.loader.conftest import PER_SHARD, write_dataset_yaml

TEXT_YAML = "sample_type: {__module__: megatron.energon, __class__: TextSample}\nfield_map: {text: txt}\n"


def _train(root, batch_size):
    return ea.get_train_dataset(
        root,
        batch_size=batch_size,
        worker_config=wc(),
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
    )


def _blend(root):
    return ea.BlendDataset((_train(root, 2), 1), (_train(root, 3), 3), worker_config=wc())


def test_blend_of_train_datasets_iterates_and_resumes(dataset_copy):
    write_dataset_yaml(dataset_copy, TEXT_YAML)
    a = _train(dataset_copy, 2)
    assert a._pipeline is None  # unwrapped: the fast loader, no pipeline built
    blend = ea.BlendDataset((a, 1), (_train(dataset_copy, 3), 3), worker_config=wc())
    assert blend.datasets[0] is a.as_pipeline() and len(blend) == sum(len(d) for d in blend.datasets)
    sizes = [len(b.text) for b in itertools.islice(ea.get_loader(blend), 400)]
    assert sizes.count(2) + sizes.count(3) == 400 and 60 <= sizes.count(2) <= 140

    full = [keys_of(b) for b in itertools.islice(ea.get_savable_loader(_blend(dataset_copy)), 30)]
    loader = ea.get_savable_loader(_blend(dataset_copy))
    it = iter(loader)
    first = [keys_of(next(it)) for _ in range(13)]
    state = loader.save_state_rank()
    resumed = ea.get_savable_loader(_blend(dataset_copy))
    resumed.restore_state_rank(state)
    assert first + [keys_of(b) for b in itertools.islice(resumed, 17)] == full


def test_mix_and_concat_of_loaded_datasets(dataset_copy):
    write_dataset_yaml(dataset_copy, TEXT_YAML)
    mix = ea.MixBatchDataset(
        (_train(dataset_copy, 1), 1), (_train(dataset_copy, 1), 1), batch_size=4, worker_config=wc()
    )
    batch = next(iter(ea.get_loader(mix)))
    assert len(batch) == 4 and all(len(b.text) == 1 for b in batch)
    val = [ea.get_val_dataset(dataset_copy, batch_size=5, worker_config=wc()) for _ in range(2)]
    both = ea.ConcatDataset(*val, worker_config=wc())
    keys = [k for b in ea.get_loader(both) for k in keys_of(b)]
    assert len(keys) == 2 * PER_SHARD and keys[:PER_SHARD] == keys[PER_SHARD:]
