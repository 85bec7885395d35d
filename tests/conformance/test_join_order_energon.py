"""`join:` metadatasets in energon's order: energon 7.4.1 slices a join's index as one run of rows (its
`slice_workers`, no cut at shard boundaries, unlike a dataset's `shard_workers`) and drops the samples split.yaml
excludes before joining, so the joined batches of the energon API must be energon's, in order, with and without
excludes in either member; and the join index energon looks for must carry the name energon gives it. Also in
energon's order: a join with a `subset:`, in a blend and in a blend_epochized (energon weighs a blend_epochized's
datasets by `len(factory)`: the primary's whole split for a join, the whole split for a `subset:`), and a join's own
`shuffle_over_epochs_multiplier`, which energon 7.4.1 parses and does not apply."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest

import energon_arrow as ea
from tests.conformance.test_metadataset_forms import V2, _write

pytestmark = pytest.mark.conformance
energon = pytest.importorskip("megatron.energon")

EXCLUDES = {
    "none": ([], []),
    "primary": (["shards/shard-000000.tar/000000_000002", "shards/shard-000001.tar/000001_000007"], []),
    "other": ([], ["shards/shard-000001.tar/000001_000003"]),
    "both": (
        [
            "shards/shard-000000.tar/000000_000002",
            "shards/shard-000001.tar/000001_000007",
            "shards/shard-000002.tar/000002_000000",
        ],
        ["shards/shard-000001.tar/000001_000003", "shards/shard-000000.tar/000000_000005"],
    ),
}


def _with_excludes(root: str, entries: list[str]) -> None:
    path = os.path.join(root, ".nv-meta", "split.yaml")
    with open(path) as f:
        text = f.read().replace("exclude: []\n", "")
    with open(path, "w") as f:
        f.write(text + "exclude:\n" + "".join(f"  - {e}\n" for e in entries) if entries else text)


@pytest.fixture(scope="module", params=list(EXCLUDES))
def join_yaml(request, tmp_path_factory):
    from tests.query.conftest import make_energon_dataset

    base = tmp_path_factory.mktemp(f"join-order-{request.param}")
    primary = make_energon_dataset(str(base / "p"), shards=3, samples=8, seed=0, split_ratio="1,0,0")
    other = make_energon_dataset(str(base / "o"), shards=2, samples=8, seed=5, split_ratio="1,0,0")
    for root, entries in zip((primary, other), EXCLUDES[request.param]):
        _with_excludes(root, entries)
    path = _write(
        base,
        "j.yaml",
        V2
        + f"""  train:
    join:
      - path: {primary}
      - path: {other}
        nonmatch: skip
    joiner:
      __module__: megatron.energon
      __class__: TextSample
""",
    )
    ea.prepare_metadataset(path)
    return path


def _keys(mod, path, split, workers=0, rank=0, world=1, **kw):
    class TE(mod.DefaultTaskEncoder):
        decoder = None

    wc = mod.WorkerConfig(rank=rank, world_size=world, num_workers=workers)
    if split == "val":
        ds = mod.get_val_dataset(path, split_part="train", worker_config=wc, batch_size=3, task_encoder=TE())
    else:
        ds = mod.get_train_dataset(
            path, worker_config=wc, batch_size=3, task_encoder=TE(), repeat=False, **kw
        )
    return len(ds), [(k, t) for b in mod.get_loader(ds) for k, t in zip(b.__key__, b.text)]


TRAIN = [
    dict(shuffle_buffer_size=None, max_samples_per_sequence=None),
    dict(shuffle_buffer_size=None, max_samples_per_sequence=3, workers=2),
    dict(shuffle_buffer_size=3, max_samples_per_sequence=None),
    dict(shuffle_buffer_size=3, max_samples_per_sequence=2, workers=2, rank=1, world=2),
]


@pytest.mark.parametrize("case", TRAIN, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_join_train_batches_in_energon_order(join_yaml, case):
    ours, ref = _keys(ea, join_yaml, "train", **case), _keys(energon, join_yaml, "train", **case)
    assert ours == ref and ours[1]


@pytest.mark.parametrize("workers", [0, 2])
def test_join_val_batches_in_energon_order(join_yaml, workers):
    assert _keys(ea, join_yaml, "val", workers) == _keys(energon, join_yaml, "val", workers)


_NAMES = """
import os, sys
import energon_arrow as ea
from megatron.energon.epathlib import EPath
from megatron.energon.metadataset.loader import load_dataset
path = sys.argv[1]
ref = load_dataset(EPath(path)).splits["train"]._dataset._get_joined_meta("train")[0].name
print(ref == os.path.basename(ea.prepare_metadataset(path)[0]))
"""


def test_join_index_named_as_energon_names_it_in_the_same_process(tmp_path_factory):
    """energon hashes a member's sample excludes in the iteration order of a set (built from the set of all
    entries), which follows Python's per-process string hashing: the name we write must be the one energon
    computes in the same process, whatever the hash seed."""
    from tests.query.conftest import make_energon_dataset

    base = tmp_path_factory.mktemp("join-names")
    primary = make_energon_dataset(str(base / "p"), shards=3, samples=8, seed=0, split_ratio="1,0,0")
    other = make_energon_dataset(str(base / "o"), shards=2, samples=8, seed=5, split_ratio="1,0,0")
    entries = [f"shards/shard-00000{s}.tar/00000{s}_00000{i}" for s in range(3) for i in range(0, 8, 3)]
    _with_excludes(primary, ["shards/shard-000002.tar", *entries])
    _with_excludes(other, entries[:4])
    path = _write(
        base,
        "j.yaml",
        V2
        + f"  train:\n    join:\n      - path: {primary}\n      - path: {other}\n        nonmatch: skip\n"
        + "    joiner:\n      __module__: megatron.energon\n      __class__: TextSample\n",
    )
    for seed in range(8):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        out = subprocess.run(
            [sys.executable, "-c", _NAMES, path], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip().splitlines()[-1] == "True", (seed, out.stdout[-500:])


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    from tests.query.conftest import make_energon_dataset

    base = tmp_path_factory.mktemp("join-more")
    primary = make_energon_dataset(str(base / "p"), shards=3, samples=8, seed=0, split_ratio="1,0,0")
    other = make_energon_dataset(str(base / "o"), shards=2, samples=8, seed=5, split_ratio="1,0,0")
    plain = make_energon_dataset(str(base / "q"), shards=2, samples=8, seed=7, split_ratio="1,0,0")
    _with_excludes(
        primary, ["shards/shard-000000.tar/000000_000002", "shards/shard-000001.tar/000001_000007"]
    )
    return primary, other, plain


JOIN = """join:
      - path: {primary}
      - path: {other}
        nonmatch: skip
    joiner:
      __module__: megatron.energon
      __class__: TextSample
"""
FORMS = {
    "subset": "  train:\n    subset: {{range: [10%, 80%]}}\n    " + JOIN,
    "multiplier": "  train:\n    shuffle_over_epochs_multiplier: 2\n    " + JOIN,
}
BLEND = """  train:
    blend:
      - weight: 2
        path: j.yaml
      - weight: 1
        path: {plain}
"""
BLEND_EP = """  train:
    blend_epochized:
      - repetitions: 2
        path: j.yaml
      - repetitions: 1
        path: {plain}
"""
BLEND_EP_SUB = """  train:
    blend_epochized:
      - repetitions: 2
        path: {plain}
        subset: {{range: [10%, 60%]}}
      - repetitions: 1.5
        path: {primary}
"""


@pytest.mark.parametrize("form", ["subset", "multiplier", "blend", "blend_epochized", "epochized_subset"])
@pytest.mark.parametrize(
    "case",
    [
        dict(shuffle_buffer_size=3, max_samples_per_sequence=2, workers=2),
        dict(shuffle_buffer_size=None, max_samples_per_sequence=None, workers=0, rank=1, world=2),
    ],
)
def test_join_forms_in_energon_order(roots, form, case, tmp_path):
    primary, other, plain = roots
    if form in FORMS:
        path = _write(tmp_path, "m.yaml", V2 + FORMS[form].format(primary=primary, other=other))
    else:
        _write(tmp_path, "j.yaml", V2 + "  train:\n    " + JOIN.format(primary=primary, other=other))
        ea.prepare_metadataset(str(tmp_path / "j.yaml"))
        text = {"blend": BLEND, "blend_epochized": BLEND_EP, "epochized_subset": BLEND_EP_SUB}[form]
        path = _write(tmp_path, "m.yaml", V2 + text.format(plain=plain, primary=primary))
    ea.prepare_metadataset(path)
    n = 40 if form == "blend" else None

    def keys(mod):
        if n is None:
            return _keys(mod, path, "train", **case)

        class TE(mod.DefaultTaskEncoder):
            decoder = None

        c = dict(case)
        wc = mod.WorkerConfig(
            rank=c.pop("rank", 0), world_size=c.pop("world", 1), num_workers=c.pop("workers", 0)
        )
        ds = mod.get_train_dataset(path, worker_config=wc, batch_size=3, task_encoder=TE(), **c)
        return [k for b in itertools.islice(mod.get_loader(ds), n) for k in b.__key__]

    ours, ref = keys(ea), keys(energon)
    assert ours == ref and ours


def test_a_joins_own_multiplier_is_reported_as_without_effect(roots, tmp_path):
    primary, other, _ = roots
    path = _write(tmp_path, "m.yaml", V2 + FORMS["multiplier"].format(primary=primary, other=other))
    with pytest.warns(UserWarning, match=r"m\.yaml.*shuffle_over_epochs_multiplier on a join has no effect"):
        ea.prepare_metadataset(path)


VALB = """  val:
    blend:
      - weight: 2
        path: j.yaml
        split_part: train
      - weight: 1
        path: {plain}
        split_part: train
"""


def _src(s):
    return (str(s.dataset_path).rsplit("/", 1)[-1], s.index, s.shard_name, tuple(s.file_names))


@pytest.mark.parametrize("workers", [0, 2])
def test_join_in_a_val_blend_with_energon_sources(roots, tmp_path, workers):
    """Every member's SourceInfo.index is the joined row's position, as energon's join index gives it."""
    primary, other, plain = roots
    _write(tmp_path, "j.yaml", V2 + "  train:\n    " + JOIN.format(primary=primary, other=other))
    ea.prepare_metadataset(str(tmp_path / "j.yaml"))
    path = _write(tmp_path, "m.yaml", V2 + VALB.format(plain=plain))

    def run(mod):
        class TE(mod.DefaultTaskEncoder):
            decoder = None

        wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=workers)
        ds = mod.get_val_dataset(path, worker_config=wc, batch_size=3, task_encoder=TE())
        return len(ds), [
            (k, tuple(_src(x) for x in s))
            for b in mod.get_loader(ds)
            for k, s in zip(b.__key__, b.__sources__)
        ]

    assert run(ea) == run(energon)


def test_join_train_sources_in_energon_order_and_restored(roots, tmp_path):
    """energon 7.4.1 itself fails to restore this state (its sample loader's restore_sample cannot unpack a
    joined restore key), so the restored batches are checked against the uninterrupted run."""
    primary, other, _ = roots
    path = _write(tmp_path, "j.yaml", V2 + "  train:\n    " + JOIN.format(primary=primary, other=other))
    ea.prepare_metadataset(path)

    def run(mod, restore=True):
        class TE(mod.DefaultTaskEncoder):
            decoder = None

        wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=2)
        ds = mod.get_train_dataset(
            path,
            worker_config=wc,
            batch_size=3,
            task_encoder=TE(),
            shuffle_buffer_size=4,
            max_samples_per_sequence=3,
        )
        loader = mod.get_savable_loader(ds)
        it = iter(loader)
        first = [
            (b.__key__, [tuple(_src(x) for x in s) for s in b.__sources__]) for b in itertools.islice(it, 5)
        ]
        state = loader.save_state_rank()
        rest = [b.__key__ for b in itertools.islice(it, 6)]
        if not restore:
            return first, rest, rest
        ds2 = mod.get_train_dataset(
            path,
            worker_config=wc,
            batch_size=3,
            task_encoder=TE(),
            shuffle_buffer_size=4,
            max_samples_per_sequence=3,
        )
        l2 = mod.get_savable_loader(ds2)
        l2.restore_state_rank(state)
        again = [b.__key__ for b in itertools.islice(iter(l2), 6)]
        return first, rest, again

    o, r = run(ea), run(energon, restore=False)
    assert o[0] == r[0]
    assert o[1] == r[1]
    assert o[2] == o[1] and r[2] == r[1]


@pytest.mark.parametrize("form", ["plain", "subset"])
@pytest.mark.parametrize("split", ["train", "val"])
def test_join_config_as_energon_reports_it(roots, tmp_path, form, split):
    """`config()`: the join's factory, its members as their own factories (the primary's class, its sample
    excludes in energon's set order), the join's `subset:` and energon's `load_sample`."""
    primary, other, _ = roots
    text = "  train:\n    " + JOIN if form == "plain" else FORMS["subset"]
    path = _write(tmp_path, "j.yaml", V2 + text.format(primary=primary, other=other))
    ea.prepare_metadataset(path)

    def cfg(mod):
        class TE(mod.DefaultTaskEncoder):
            decoder = None

        wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=2)
        if split == "val":
            ds = mod.get_val_dataset(
                path, split_part="train", worker_config=wc, batch_size=3, task_encoder=TE()
            )
        else:
            ds = mod.get_train_dataset(
                path,
                worker_config=wc,
                batch_size=3,
                task_encoder=TE(),
                shuffle_buffer_size=4,
                max_samples_per_sequence=3,
            )
        return json.loads(json.dumps(ds.config(), default=str))

    o, r = cfg(ea), cfg(energon)  # one process: energon's set orders are this process's
    assert o == r
