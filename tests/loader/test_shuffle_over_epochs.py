"""shuffle_over_epochs_multiplier with energon's meaning (k >= 1: one shuffle spans k epochs, every sample k times;
-1: blocks of samples drawn with replacement, endless; None: no shuffling) and virtual epochs on top of it, all
with exact resume whatever the worker count."""

from __future__ import annotations

from collections import Counter

import pytest

import energon_arrow as ea
from energon_arrow.loader.errors import LoaderError
from tests.energon_order import global_order_train_dataset

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

N = 120  # train split of the prepared dataset: 3 shards x 40


class Raw(ea.DefaultTaskEncoder):
    decoder = None  # the synthetic images are not real JPEGs


def train(root, multiplier, *, workers=0, batch_size=5, repeat=True, **kw):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers, seed_offset=9)
    ds = global_order_train_dataset(
        root,
        worker_config=wc,
        batch_size=batch_size,
        shuffle_over_epochs_multiplier=multiplier,
        max_samples_per_sequence=4,
        repeat=repeat,
        task_encoder=Raw(),
        **kw,
    )
    return ea.get_savable_loader(ds)


def keys(ld, n=None):
    it = iter(ld)
    try:
        out = []
        for batch in it:
            out += batch.__key__
            if n is not None and len(out) >= n:
                return out[:n]
        return out
    finally:
        it.close()


def test_multiplier_two_spans_two_epochs(prepared_root):
    span = keys(train(prepared_root, 2, repeat=False))
    assert len(span) == 2 * N and set(Counter(span).values()) == {2}  # every sample exactly twice
    assert len(set(span[:N])) < N  # not two concatenated epochs: some samples come twice in the first N
    assert keys(train(prepared_root, 2), 2 * N) == span  # repeat=True continues with the same span
    assert keys(train(prepared_root, 1), N) != span[:N]


def test_multiplier_one_and_default_agree(prepared_root):
    assert keys(train(prepared_root, 1), 30) == keys(ea.get_loader(_default(prepared_root)), 30)


def _default(root):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0, seed_offset=9)
    return global_order_train_dataset(
        root, worker_config=wc, batch_size=5, max_samples_per_sequence=4, task_encoder=Raw()
    )


def test_none_keeps_table_order(prepared_root):
    first = keys(train(prepared_root, None), 2 * N)
    assert first[:N] == first[N:] and len(set(first[:N])) == N
    val_order = [
        k
        for b in ea.get_loader(
            ea.get_val_dataset(
                prepared_root,
                split_part="train",
                worker_config=ea.WorkerConfig(rank=0, world_size=1, num_workers=0),
                batch_size=5,
                task_encoder=Raw(),
            )
        )
        for k in b.__key__
    ]
    assert first[:N] == val_order
    buffered = keys(train(prepared_root, None, shuffle_buffer_size=10), N)
    assert buffered != first[:N] and sorted(buffered) == sorted(first[:N])  # the shuffle buffer still applies


def test_minus_one_draws_blocks_with_replacement(prepared_root):
    stream = keys(train(prepared_root, -1, repeat=False), 4 * N)  # endless even with repeat=False
    assert len(stream) == 4 * N
    counts = Counter(stream[:N])
    assert max(counts.values()) > 1 or len(counts) < N  # drawn with replacement
    assert keys(train(prepared_root, -1), 4 * N) == stream


@pytest.mark.parametrize("multiplier", [2, -1])
@pytest.mark.parametrize("workers", [0, 2])
def test_exact_resume(prepared_root, multiplier, workers):
    ref = keys(train(prepared_root, multiplier), 3 * N)
    for cut in (7, 23, 47):  # batches of 5: 47 * 5 crosses the first span boundary (240) for k = 2
        first = train(prepared_root, multiplier, workers=workers)
        keys(first, cut * 5)
        state = first.save_state_rank()
        second = train(prepared_root, multiplier, workers=2 - workers)
        second.restore_state_rank(state)
        assert keys(second, 3 * N - cut * 5) == ref[cut * 5 :]


def test_virtual_epochs_over_a_multi_epoch_shuffle_resume(prepared_root):
    ref = keys(train(prepared_root, 3), 60)
    loader = train(prepared_root, 3, virtual_epoch_length=4)
    assert len(loader) == 4
    epochs = [keys(loader)]
    it = iter(loader)
    partial = [k for _ in range(3) for k in next(it).__key__]
    state = loader.save_state_rank()
    it.close()
    resumed = train(prepared_root, 3, virtual_epoch_length=4, workers=2)
    resumed.restore_state_rank(state)
    epochs.append(partial + keys(resumed))  # the rest of the interrupted virtual epoch
    epochs.append(keys(resumed))
    assert [len(e) for e in epochs] == [20, 20, 20] and sum(epochs, []) == ref


def test_finite_pass_ends_the_virtual_epoch(prepared_root):
    loader = train(prepared_root, 1, repeat=False, virtual_epoch_length=16)  # 24 batches per pass
    lengths = [len(keys(loader)) // 5 for _ in range(3)]
    assert lengths == [16, 8, 16]


def test_state_of_another_multiplier_is_refused(prepared_root):
    first = train(prepared_root, 2)
    keys(first, 10)
    other = train(prepared_root, 1)
    with pytest.raises(LoaderError, match="shuffle_over_epochs"):
        other.restore_state_rank(first.save_state_rank())


def _mds(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n" + body)
    return str(path)


def _pass_keys(path, multiplier=1):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = global_order_train_dataset(
        path,
        worker_config=wc,
        batch_size=5,
        shuffle_over_epochs_multiplier=multiplier,
        task_encoder=Raw(),
        repeat=False,
    )
    return [k for b in ea.get_loader(ds) for k in b.__key__]


def test_metadataset_multipliers_combine_as_energons(tmp_path, prepared_root):
    inner = _mds(
        tmp_path,
        "inner.yaml",
        f"  train:\n    path: {prepared_root}\n    shuffle_over_epochs_multiplier: 2\n",
    )
    outer = _mds(
        tmp_path, "outer.yaml", f"  train:\n    path: {inner}\n    shuffle_over_epochs_multiplier: 3\n"
    )
    assert set(Counter(_pass_keys(inner)).values()) == {2}
    assert set(Counter(_pass_keys(outer)).values()) == {6}  # nested references multiply
    assert set(Counter(_pass_keys(inner, 2)).values()) == {4}  # and so does the loader's argument
    assert _pass_keys(inner, None) == _pass_keys(prepared_root, None)  # None wins: no shuffling
    endless = _mds(
        tmp_path, "endless.yaml", f"  train:\n    path: {inner}\n    shuffle_over_epochs_multiplier: -1\n"
    )
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = global_order_train_dataset(endless, worker_config=wc, batch_size=5, task_encoder=Raw(), repeat=False)
    assert len(keys(ea.get_loader(ds), 3 * N)) == 3 * N  # -1 wins over 2: endless even with repeat=False


def test_metadataset_multiplier_errors(tmp_path, prepared_root):
    bad = _mds(
        tmp_path, "bad.yaml", f"  train:\n    path: {prepared_root}\n    shuffle_over_epochs_multiplier: 0\n"
    )
    with pytest.raises(LoaderError, match=r"bad\.yaml: line \d+.*must be an integer >= 1, -1 or null, got 0"):
        _pass_keys(bad)
    epochized = _mds(
        tmp_path,
        "epochized.yaml",
        f"  train:\n    blend_epochized:\n      - repetitions: 1\n        path: {prepared_root}\n"
        "        shuffle_over_epochs_multiplier: -1\n",
    )
    with pytest.raises(LoaderError, match="whole repetition never ends"):  # energon's stream would not end
        _pass_keys(epochized)


def test_blend_epochized_passes_span_k_epochs(tmp_path, prepared_root):
    epochized = _mds(
        tmp_path,
        "epochized.yaml",
        f"  train:\n    blend_epochized:\n      - repetitions: 1.5\n        path: {prepared_root}\n"
        "        shuffle_over_epochs_multiplier: 2\n",
    )
    counts = Counter(_pass_keys(epochized))
    assert (
        sum(counts.values()) == 2 * N + N // 2
    )  # a whole repetition is one pass over 2 epochs, + half a pass
    assert set(counts.values()) <= {2, 3, 4}
    ordered = Counter(_pass_keys(epochized, None))  # None wins: the split's order, the first half repeated
    assert sorted(ordered.values()) == [1] * (N - N // 2) + [2] * (N // 2)
