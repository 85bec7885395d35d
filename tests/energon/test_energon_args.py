"""energon 7.4's loading arguments: defaults accepted, no-effect arguments harmless, unimplemented values refused
by name, val limit, virtual epochs, sample_type, deprecated decoder / handler arguments, global state, logging,
WorkerConfig."""

from __future__ import annotations

import json

import pytest

import energon_arrow as ea
from energon_arrow.adapters import NotFound
from energon_arrow.loader.errors import LoaderError
from tests.energon_order import global_order_train_dataset

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


class RawTE(ea.DefaultTaskEncoder):
    decoder = None


def wc(workers=0, **kw):
    return ea.WorkerConfig(rank=0, world_size=1, num_workers=workers, **kw)


def train(root, te=None, **kw):
    kw.setdefault("worker_config", wc())
    kw.setdefault("batch_size", 4)
    return global_order_train_dataset(
        root, shuffle_buffer_size=None, max_samples_per_sequence=None, task_encoder=te or RawTE(), **kw
    )


def keys(loader, n):
    it = iter(loader)
    out = [next(it).__key__ for _ in range(n)]
    it.close()
    return out


def test_energon_defaults_accepted(prepared_root):
    ds = train(
        prepared_root,
        packing_buffer_size=None,
        virtual_epoch_length=0,
        shuffle_over_epochs_multiplier=1,
        parallel_shard_iters=None,
        dataset_config="dataset.yaml",
        split_config="split.yaml",
        sample_type=ea.CaptioningSample,
    )
    loader = ea.get_savable_loader(
        ds,
        checkpoint_every_sec=60,
        checkpoint_every_min_n_samples=None,
        n_checkpoints=None,
        gc_collect_every_n_steps=10,
        prefetch_factor=2,
        cache_pool=None,
        watchdog_timeout_seconds=60,
        watchdog_initial_timeout_seconds=None,
        fail_on_timeout=False,
    )
    assert keys(loader, 3) == keys(ea.get_loader(train(prepared_root)), 3)


def test_no_effect_arguments_do_not_change_results(prepared_root):
    ref = keys(ea.get_loader(train(prepared_root)), 5)
    ds = train(prepared_root, parallel_shard_iters=7)
    loader = ea.get_savable_loader(ds, checkpoint_every_sec=1, n_checkpoints=3, gc_collect_every_n_steps=1)
    assert keys(loader, 5) == ref


@pytest.mark.parametrize(
    "kw,message",
    [
        (
            {"packing_buffer_size": 16},
            r"packing_buffer_size=16 needs the task encoder to define both select_samples_to_pack",
        ),
        ({"shuffle_over_epochs_multiplier": 0}, r"shuffle_over_epochs_multiplier must be >= 1, -1 or None"),
        ({"dataset_config": "../dataset.yaml"}, r"must name a file under the dataset's .nv-meta folder"),
        ({"subset": {"range": [0, 0.5]}}, r"subset= is not supported here"),
        ({"bogus": 1}, r"unknown argument\(s\) \['bogus'\]"),
        (
            {"sample_type": ea.TextSample},
            r"samples are CaptioningSample, not a subclass of sample_type=TextSample",
        ),
        ({"batch_size": 0}, r"batch_size must be a positive integer or None"),
    ],
)
def test_unimplemented_values_refused_by_name(prepared_root, kw, message):
    with pytest.raises(LoaderError, match=message):
        train(prepared_root, **kw)


OTHER_SPLIT = """split_parts:
  train: [shards/shard-000003.tar]
  val: [shards/shard-000000.tar, shards/shard-000001.tar]
exclude: [shards/shard-000000.tar/000000_000003]
"""
TEXT_DATASET = """sample_type: {__module__: megatron.energon, __class__: TextSample}
field_map: {text: txt}
"""


def _val_keys(mod, root, task_encoder=None, **kw):
    """Every key of the val split in order, and the field names of the first batch, through module `mod`."""
    ds = mod.get_val_dataset(root, split_part="val", worker_config=mod.WorkerConfig(rank=0, world_size=1,
                             num_workers=0), batch_size=8, **kw, **({"task_encoder": task_encoder} if task_encoder else {}))  # fmt: skip
    batches = list(mod.get_loader(ds))
    return [k for b in batches for k in b.__key__], type(batches[0]).__name__


def test_other_split_and_dataset_config_files(dataset_copy):
    """energon's dataset_config / split_config: other files under .nv-meta, read as energon 7.4.1 reads them (its
    own loader over the same copy gives the same keys in the same order and the same batch type)."""
    with open(f"{dataset_copy}/.nv-meta/split-other.yaml", "w") as f:
        f.write(OTHER_SPLIT)
    with open(f"{dataset_copy}/.nv-meta/dataset-text.yaml", "w") as f:
        f.write(TEXT_DATASET)
    kw = {"split_config": "split-other.yaml", "dataset_config": "dataset-text.yaml"}
    keys, batch_type = _val_keys(ea, dataset_copy, **kw)
    assert len(keys) == 79 and "000000_000003" not in keys and keys[0].startswith("000000_")
    assert batch_type == "TextSample"
    assert _val_keys(ea, dataset_copy, RawTE())[1] == "CaptioningSample"  # the defaults are unchanged
    train_ds = train(dataset_copy, ea.DefaultTaskEncoder(), repeat=False, **kw)  # TextSample: txt decoded
    train_keys = [k for b in ea.get_loader(train_ds) for k in b.__key__]
    assert sorted(train_keys) == sorted(f"000003_{i:06d}" for i in range(40))
    loader = ea.load_dataset(dataset_copy, **kw).get_datasets(
        training=False, split_part="val", worker_config=wc()
    )
    assert len(loader.datasets) == 1 and len(loader.datasets[0].dataset) == 79
    with pytest.raises(NotFound, match=r"\.nv-meta/missing\.yaml: not found"):
        train(dataset_copy, split_config="missing.yaml")
    energon = pytest.importorskip("megatron.energon")
    assert _val_keys(energon, dataset_copy, **kw) == (keys, batch_type)


def test_config_files_apply_to_prepared_datasets_only(tmp_path):
    mds = tmp_path / "mds.yaml"
    mds.write_text("__module__: megatron.energon\n__class__: MetadatasetV2\nsplits: {}\n")
    with pytest.raises(LoaderError, match="per dataset in the metadataset"):
        train(str(mds), split_config="other.yaml")


def test_loader_arguments_refused_or_checked(prepared_root):
    ds = train(prepared_root)
    with pytest.raises(LoaderError, match="cache_pool must be a"):
        ea.get_savable_loader(ds, cache_pool=object())
    with pytest.raises(LoaderError, match="does not match the dataset's"):
        ea.get_loader(ds, worker_config=wc(workers=3))
    ea.get_loader(ds, worker_config=wc())  # the dataset's own config is fine


def test_sample_type_accepts_base_classes(prepared_root):
    assert len(train(prepared_root, sample_type=ea.Sample, repeat=False)) == 30


def test_val_limit_restarts_every_pass(prepared_root):
    ds = ea.get_val_dataset(prepared_root, worker_config=wc(), batch_size=2, limit=3, task_encoder=RawTE())
    loader = ea.get_loader(ds)
    assert len(ds) == len(loader) == 3
    passes = [[b.__key__ for b in loader] for _ in range(3)]
    assert len(passes[0]) == 3 and passes[0] == passes[1] == passes[2]
    full_ds = ea.get_val_dataset(prepared_root, worker_config=wc(), batch_size=2, task_encoder=RawTE())
    full = [b.__key__ for b in ea.get_loader(full_ds)]
    assert passes[0] == full[:3]


@pytest.mark.heavy
def test_val_len_matches_energon_without_workers(energon_prepared_root):
    energon = pytest.importorskip("megatron.energon")
    for batch, limit in [(1, None), (7, None), (4, 3)]:
        lens = []
        for mod in (ea, energon):
            cfg = mod.WorkerConfig(rank=0, world_size=1, num_workers=0)
            ds = mod.get_val_dataset(energon_prepared_root, worker_config=cfg, batch_size=batch, limit=limit)
            lens.append((len(ds), len(mod.get_loader(ds))))
        assert lens[0] == lens[1]


def test_virtual_epochs_continue_the_stream(prepared_root):
    ref = keys(ea.get_loader(train(prepared_root)), 10)
    loader = ea.get_savable_loader(train(prepared_root, virtual_epoch_length=4))
    assert len(loader) == 4
    first = [b.__key__ for b in loader]
    it = iter(loader)
    second = [next(it).__key__]
    state = loader.save_state_rank()
    it.close()
    resumed = ea.get_savable_loader(train(prepared_root, virtual_epoch_length=4, worker_config=wc(workers=2)))
    resumed.restore_state_rank(state)
    second += [b.__key__ for b in resumed]  # the rest of the interrupted virtual epoch
    third = [b.__key__ for b in resumed]
    assert len(first) == len(second) == len(third) == 4
    assert first + second + third[:2] == ref


def test_state_global_single_process(prepared_root):
    loader = ea.get_savable_loader(train(prepared_root))
    ref = keys(loader, 6)[3:]
    loader = ea.get_savable_loader(train(prepared_root))
    keys(loader, 3)
    states = loader.save_state_global(global_dst_rank=0)
    assert isinstance(states, list) and len(states) == 1
    json.dumps(states)  # plain data
    for src_rank in (None, 0):
        again = ea.get_savable_loader(train(prepared_root))
        again.restore_state_global(states, src_rank=src_rank)
        assert keys(again, 3) == ref
    with pytest.raises(LoaderError, match="expected a list of 1 rank states"):
        again.restore_state_global(states[0])
    fresh = ea.get_savable_loader(train(prepared_root))
    fresh.restore_state_rank(None)
    assert keys(fresh, 3) == keys(ea.get_loader(train(prepared_root)), 3)


def test_deprecated_decoder_arguments(prepared_root):
    te = ea.DefaultTaskEncoder()
    with pytest.warns(DeprecationWarning, match="decoder arguments"):
        train(prepared_root, te=te, image_decode="pil")
    assert te.decoder.config()["image_decode"] == "pil"
    with pytest.warns(DeprecationWarning):
        train(prepared_root, te=te, image_decode="pil")  # the same decoder again: fine
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(LoaderError, match="already has a different decoder"),
    ):
        train(prepared_root, te=te, image_decode="torchrgb")
    raw = ea.DefaultTaskEncoder()
    ds = train(prepared_root, te=raw, auto_decode=False)
    assert raw.decoder is None
    (batch,) = [next(iter(ea.get_loader(ds)))]
    assert isinstance(batch.caption[0], bytes)


def test_deprecated_handler_is_the_error_handler(prepared_root):
    seen = []

    class Failing(RawTE):
        def encode_sample(self, sample):
            if sample.__key__.endswith("7"):
                raise ValueError("bad")
            return sample

    with pytest.warns(DeprecationWarning, match="handler"):
        ds = ea.get_val_dataset(
            prepared_root,
            worker_config=wc(),
            batch_size=8,
            task_encoder=Failing(),
            handler=lambda exc, sample, sources: seen.append(sample.__key__),
        )
    n = sum(len(b.__key__) for b in ea.get_loader(ds))
    assert n == 36 and len(seen) == 4 and all(k.endswith("7") for k in seen)


def test_get_val_datasets_one_per_dataset(prepared_root):
    pairs = ea.get_val_datasets(prepared_root, worker_config=wc(), batch_size=5, task_encoder=RawTE())
    assert len(pairs) == 1
    ds, source = pairs[0]
    assert len(source) == 40 and len(ds) == 8


def test_worker_log(prepared_root, tmp_path):
    """energon's worker debug log: the loader's records in file 0 (the main process), each worker's `yield_batch`
    records in files 1, 2 (rank 0's workers), the same keys as the batches."""
    path = str(tmp_path / "log-{worker_id}.jsonl")
    ds = train(prepared_root, worker_config=wc(2, worker_log_level=1, worker_debug_path=path))
    loader = ea.get_savable_loader(ds)
    got = keys(loader, 4)
    lines = [json.loads(x) for x in (tmp_path / "log-0.jsonl").read_text().splitlines()]
    assert [line["t"] for line in lines[:2]] == ["SavableLoader.__init__", "SavableDataLoader.iter"]
    assert lines[0]["config"]["mode"] == "train" and lines[0]["config"]["datasets"][0].startswith(
        prepared_root
    )
    yields = [line for line in lines if line["t"] == "SavableDataLoader.yield"]
    assert [y["keys"] for y in yields] == got and [y["idx"] for y in yields] == [0, 1, 2, 3]
    assert [(y["worker_id"], y["worker_idx"]) for y in yields] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert lines[-1]["t"] == "SavableDataLoader.StopIteration"
    per_worker = [
        [json.loads(x) for x in (tmp_path / f"log-{w}.jsonl").read_text().splitlines()] for w in (1, 2)
    ]
    assert all(r["t"] == "yield_batch" and r["m"] == "train" for records in per_worker for r in records)
    assert {r["w"] for r in per_worker[0]} == {0} and {r["w"] for r in per_worker[1]} == {1}
    assert per_worker[0][0]["keys"] == got[0] and per_worker[1][0]["keys"] == got[1]


def test_worker_log_off_writes_nothing(prepared_root, tmp_path):
    path = str(tmp_path / "log-{worker_id}.jsonl")
    ds = train(prepared_root, worker_config=wc(worker_debug_path=path))
    loader = ea.get_savable_loader(ds)
    keys(loader, 2)
    assert loader.debug_log is None and not list(tmp_path.iterdir())


def test_worker_config_like_energon():
    energon = pytest.importorskip("megatron.energon")
    for rank, world, workers, seed in [(0, 1, 0, 0), (1, 2, 0, 7), (1, 3, 4, 42)]:
        ours = ea.WorkerConfig(rank=rank, world_size=world, num_workers=workers, seed_offset=seed)
        ref = energon.WorkerConfig(rank=rank, world_size=world, num_workers=workers, seed_offset=seed)
        for w in range(max(workers, 1)):
            assert ours.worker_seed(w if workers else None) == ref.worker_seed(w if workers else None)
        assert ours.config() == ref.config()
        assert ours.global_worker_id(0) == ref.global_worker_id(0)
    a = ea.WorkerConfig(rank=0, world_size=1, num_workers=2, seed_offset=1)
    assert a == ea.WorkerConfig(rank=0, world_size=1, num_workers=2) and a != wc(workers=3)
    default = ea.WorkerConfig.default_worker_config(3)
    assert (default.rank, default.world_size, default.num_workers) == (0, 1, 3)
    assert a.rank_worker_id() == 0 and not a.should_log(1) and a.global_rank() == 0
    assert a.global_error_handler is ea.log_exception and a.restore_error_handler is ea.reraise_exception
    with pytest.raises(TypeError):
        ea.WorkerConfig(0, 1, 2)  # keyword-only, as energon's


def test_watchdog_dumps_stacks_of_a_stuck_batch(prepared_root, capsys, monkeypatch):
    import threading

    from energon_arrow.energon.watchdog import Watchdog

    fired = threading.Event()
    fire = Watchdog._fire
    monkeypatch.setattr(Watchdog, "_fire", lambda self: (fire(self), fired.set()))

    class Stuck(RawTE):
        def encode_sample(self, sample):
            fired.wait(60)  # returns as soon as the watchdog has fired
            return sample

    ds = train(prepared_root, te=Stuck())
    loader = ea.get_loader(ds, watchdog_timeout_seconds=0.05)
    with pytest.warns(RuntimeWarning, match="Watchdog triggered"):
        keys(loader, 1)
    assert fired.is_set()
    err = capsys.readouterr().err
    assert "Watchdog triggered" in err and "in encode_sample" in err
