"""Sample packing (packing_buffer_size) with energon's semantics: consecutive buffers of encoded samples go to
select_samples_to_pack, postencode_sample runs on the selected samples, pack_selected_samples packs each group,
the packs are batched / grouped; errors follow energon's contract; the loader state resumes exactly inside a
partly filled packing buffer whatever the worker count."""

from __future__ import annotations

import pytest

import energon_arrow as ea
from energon_arrow.loader.errors import FatalSampleError, LoaderError
from tests.energon_order import global_order_train_dataset

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

CAPACITY = 6


@ea.edataclass
class Item(ea.Sample):
    length: int
    posted: bool = False


@ea.edataclass
class Packed(ea.Sample):
    keys: list
    length: int


def length_of(key: str) -> int:
    return int(key[-2:]) % 4 + 1


class PackTE(ea.DefaultTaskEncoder):
    """Greedy first-fit packing of samples of length 1..4 into packs of at most CAPACITY."""

    decoder = None

    def __init__(self):
        super().__init__()
        self.selected = 0

    def preencode_sample(self, sample):
        return Item.derive_from(sample, length=length_of(sample.__key__))

    def postencode_sample(self, sample):
        return Item.derive_from(sample, length=sample.length, posted=True)

    def select_samples_to_pack(self, samples):
        packs, current, size = [], [], 0
        for s in sorted(samples, key=lambda s: (-s.length, s.__key__)):
            if size + s.length > CAPACITY:
                packs.append(current)
                current, size = [], 0
            current.append(s)
            size += s.length
        return packs + [current]

    @ea.stateless
    def pack_selected_samples(self, samples):
        assert all(s.posted for s in samples)  # postencode_sample ran after the selection
        return Packed.derive_from(
            samples[0], keys=[s.__key__ for s in samples], length=sum(s.length for s in samples)
        )

    def batch(self, samples):
        return {"keys": [p.keys for p in samples], "length": [p.length for p in samples]}


def make_loader(root, te=None, *, batch_size=3, buffer=7, workers=0, repeat=True, **kw):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=workers, seed_offset=3)
    ds = global_order_train_dataset(
        root,
        worker_config=wc,
        batch_size=batch_size,
        packing_buffer_size=buffer,
        shuffle_buffer_size=None,
        max_samples_per_sequence=4,
        task_encoder=te or PackTE(),
        repeat=repeat,
        **kw,
    )
    return ea.get_savable_loader(ds)


def take(ld, n):
    it = iter(ld)
    try:
        return [next(it) for _ in range(n)]
    finally:
        it.close()


def unpacked_keys(root, n):
    """The first n keys of the same training stream without packing (same seed, one sample at a time)."""
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0, seed_offset=3)

    class Plain(ea.DefaultTaskEncoder):
        decoder = None

    ds = global_order_train_dataset(
        root,
        worker_config=wc,
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=4,
        task_encoder=Plain(),
    )
    return [s.__key__ for s in take(ea.get_loader(ds), n)]


def model_packs(keys, buffer):
    """energon's PackingDataset on a key stream: consecutive buffers, first-fit groups, one pack per group."""
    packs = []
    for start in range(0, len(keys) - buffer + 1, buffer):
        window = keys[start : start + buffer]
        current, size = [], 0
        for k in sorted(window, key=lambda k: (-length_of(k), k)):
            if size + length_of(k) > CAPACITY:
                packs.append(current)
                current, size = [], 0
            current.append(k)
            size += length_of(k)
        packs.append(current)
    return packs


def flat(batches):
    return [keys for b in batches for keys in b["keys"]]


def test_packs_follow_energons_buffer_semantics(prepared_root):
    batches = take(make_loader(prepared_root), 10)
    assert [len(b["keys"]) for b in batches] == [3] * 10
    packs = flat(batches)
    assert all(sum(map(length_of, p)) <= CAPACITY for p in packs)
    expected = model_packs(unpacked_keys(prepared_root, 7 * 20), 7)
    assert packs == expected[: len(packs)]


@pytest.mark.parametrize("workers", [0, 2])
def test_exact_resume_inside_partly_filled_buffers(prepared_root, workers):
    ref = take(make_loader(prepared_root), 14)
    windows = []
    for cut in (1, 4, 6, 9):
        first = make_loader(prepared_root, workers=workers)
        take(first, cut)
        state = first.save_state_rank()
        windows.append(len(state["regroup"]["workers"][0]["packing"]["window"]))
        second = make_loader(prepared_root, workers=2 - workers)
        second.restore_state_rank(state)
        assert take(second, 14 - cut) == ref[cut:]
    assert any(windows)  # some states hold a partly filled packing buffer


def test_worker_count_does_not_change_packs(prepared_root):
    assert take(make_loader(prepared_root, workers=2), 8) == take(make_loader(prepared_root), 8)


def test_finite_pass_packs_every_sample_once_and_flushes_the_last_buffer(prepared_root):
    batches = list(make_loader(prepared_root, repeat=False, buffer=50))
    keys = [k for p in flat(batches) for k in p]
    assert len(keys) == len(set(keys)) == 120  # 120 % 50 != 0: the partial last buffer is packed too
    dropped = list(make_loader(prepared_root, repeat=False, buffer=50, batch_drop_last=True))
    assert all(len(b["keys"]) == 3 for b in dropped) and len(dropped) == len(batches) - 1


def test_unselected_samples_are_dropped_and_postencode_runs_on_selected_only(prepared_root):
    posted = []

    class OnlyShort(PackTE):
        def postencode_sample(self, sample):
            posted.append(sample.__key__)
            return super().postencode_sample(sample)

        def select_samples_to_pack(self, samples):
            return [[s] for s in samples if s.length == 1]

    packs = flat(list(make_loader(prepared_root, OnlyShort(), repeat=False, buffer=5)))
    assert packs and all(len(p) == 1 and length_of(p[0]) == 1 for p in packs)
    assert sorted(posted) == sorted(p[0] for p in packs)


def test_generator_pack_and_grouped_batches_resume(prepared_root):
    class Split(PackTE):
        @ea.stateless
        def pack_selected_samples(self, samples):  # two packs per group: its halves
            half = (len(samples) + 1) // 2
            for part in (samples[:half], samples[half:]):
                if part:
                    yield super().pack_selected_samples(part)

        def batch_group_criterion(self, sample):
            return len(sample.keys), 2

    ref = take(make_loader(prepared_root, Split(), batch_size=None), 12)
    assert all(len({len(k) for k in b["keys"]}) == 1 and len(b["keys"]) == 2 for b in ref)
    first = make_loader(prepared_root, Split(), batch_size=None)
    take(first, 5)
    second = make_loader(prepared_root, Split(), batch_size=None, workers=2)
    second.restore_state_rank(first.save_state_rank())
    assert take(second, 7) == ref[5:]


def test_unbatched_packs(prepared_root):
    packs = take(make_loader(prepared_root, batch_size=None), 6)
    assert all(isinstance(p, Packed) for p in packs)
    assert [p.keys for p in packs] == flat(take(make_loader(prepared_root, batch_size=1), 6))


def test_val_packing(prepared_root):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    val = ea.get_val_dataset(
        prepared_root, worker_config=wc, batch_size=2, packing_buffer_size=8, task_encoder=PackTE()
    )
    keys = [k for p in flat(list(ea.get_loader(val))) for k in p]
    assert sorted(keys) == sorted(set(keys)) and len(keys) == 40


def test_select_errors_go_to_the_handler_and_drop_the_buffer(prepared_root):
    seen = []

    class Failing(PackTE):
        def select_samples_to_pack(self, samples):
            if any(s.__key__.endswith("7") for s in samples):
                raise ValueError("bad buffer")
            return super().select_samples_to_pack(samples)

    wc = ea.WorkerConfig(
        rank=0, world_size=1, num_workers=0, global_error_handler=lambda e, s, src: seen.append(e)
    )
    ds = global_order_train_dataset(
        prepared_root,
        worker_config=wc,
        batch_size=2,
        packing_buffer_size=4,
        task_encoder=Failing(),
        repeat=False,
    )
    keys = [k for p in flat(list(ea.get_loader(ds))) for k in p]
    assert seen and all(str(e) == "bad buffer" for e in seen)
    assert not any(k.endswith("7") for k in keys) and 0 < len(keys) < 120


def test_empty_selections_are_fatal_after_the_tolerance(prepared_root):
    class Empty(PackTE):
        @ea.stateless(failure_tolerance=3)
        def select_samples_to_pack(self, samples):
            return []

    with pytest.raises(FatalSampleError, match="did not select any pack in 4 buffers"):
        take(make_loader(prepared_root, Empty(), buffer=2), 1)


def test_packing_configuration_errors(prepared_root):
    class NoPack(ea.DefaultTaskEncoder):
        def select_samples_to_pack(self, samples):
            return [samples]

    with pytest.raises(LoaderError, match=r"define both .* lacks \['pack_selected_samples'\]"):
        make_loader(prepared_root, NoPack())
    with pytest.raises(LoaderError, match="packing_buffer_size must be a positive integer"):
        make_loader(prepared_root, buffer=0)

    class GenPost(PackTE):
        def postencode_sample(self, sample):
            yield sample

    with pytest.raises(LoaderError, match="postencode_sample must return one sample"):
        make_loader(prepared_root, GenPost())

    class Copies(PackTE):
        def select_samples_to_pack(self, samples):
            return [[Item.derive_from(s, length=s.length)] for s in samples]

    with pytest.raises(LoaderError, match="not one of the buffer's samples"):
        take(make_loader(prepared_root, Copies()), 1)


def test_finite_pass_resumes_to_its_end(prepared_root):
    ref = list(make_loader(prepared_root, repeat=False, buffer=9))
    for cut in (1, len(ref) // 2, len(ref) - 1):
        first = make_loader(prepared_root, repeat=False, buffer=9)
        take(first, cut)
        second = make_loader(prepared_root, repeat=False, buffer=9, workers=2)
        second.restore_state_rank(first.save_state_rank())
        assert list(second) == ref[cut:]


def test_val_limit_with_packing(prepared_root):
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    val = ea.get_val_dataset(
        prepared_root, worker_config=wc, batch_size=2, packing_buffer_size=8, task_encoder=PackTE(), limit=3
    )
    loader = ea.get_loader(val)
    first, second = list(loader), list(loader)
    assert len(first) == 3 and first == second  # every pass starts over
