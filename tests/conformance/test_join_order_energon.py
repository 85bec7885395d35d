"""`join:` metadatasets in energon's order: energon 7.4.1 slices a join's index as one run of rows (its
`slice_workers`, no cut at shard boundaries, unlike a dataset's `shard_workers`) and drops the samples split.yaml
excludes before joining, so the joined batches of the energon API must be energon's, in order, with and without
excludes in either member; and the join index energon looks for must carry the name energon gives it. Also in
energon's order: a join with a `subset:`, in a blend and in a blend_epochized (energon weighs a blend_epochized's
datasets by `len(factory)`: the primary's whole split for a join, the whole split for a `subset:`), and a join's own
`shuffle_over_epochs_multiplier`, which energon 7.4.1 parses and does not apply. Every member's SourceInfo.index is
the joined row's position, and `config()` describes the join as energon does."""

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

JOIN = """join:
      - path: {primary}
      - path: {other}
        nonmatch: skip
    joiner:
      __module__: megatron.energon
      __class__: TextSample
"""
TRAIN_JOIN = "  train:\n    " + JOIN


def _with_excludes(root: str, entries: list[str]) -> None:
    path = os.path.join(root, ".nv-meta", "split.yaml")
    with open(path) as f:
        text = f.read().replace("exclude: []\n", "")
    with open(path, "w") as f:
        f.write(text + "exclude:\n" + "".join(f"  - {e}\n" for e in entries) if entries else text)


def _datasets(base, primary_excludes: list[str], other_excludes: list[str], plain: bool = False) -> list[str]:
    """The primary (3 shards x 8), the other member (2 shards x 8: the primary's third shard has no match) and
    with `plain` a third dataset to blend with, prepared by energon, with these split.yaml excludes."""
    from tests.query.conftest import make_energon_dataset

    roots = [
        make_energon_dataset(str(base / name), shards=shards, samples=8, seed=seed, split_ratio="1,0,0")
        for name, shards, seed in [("p", 3, 0), ("o", 2, 5), ("q", 2, 7)][: 3 if plain else 2]
    ]
    _with_excludes(roots[0], primary_excludes)
    _with_excludes(roots[1], other_excludes)
    return roots


def _dataset(mod, path, split, workers=0, rank=0, world=1, **kw):
    """`mod`'s dataset (energon_arrow or megatron.energon) of `path`: val of its train split, or train."""

    class TE(mod.DefaultTaskEncoder):
        decoder = None

    wc = mod.WorkerConfig(rank=rank, world_size=world, num_workers=workers)
    if split == "val":
        return mod.get_val_dataset(path, worker_config=wc, batch_size=3, task_encoder=TE(), **kw)
    return mod.get_train_dataset(path, worker_config=wc, batch_size=3, task_encoder=TE(), **kw)


def _keys(mod, path, split, **kw):
    if split == "val":
        kw["split_part"] = "train"
    else:
        kw.setdefault("repeat", False)
    ds = _dataset(mod, path, split, **kw)
    return len(ds), [(k, t) for b in mod.get_loader(ds) for k, t in zip(b.__key__, b.text)]


def _src(s) -> tuple:
    return (str(s.dataset_path).rsplit("/", 1)[-1], s.index, s.shard_name, tuple(s.file_names))


@pytest.fixture(scope="module", params=list(EXCLUDES))
def join_yaml(request, tmp_path_factory):
    base = tmp_path_factory.mktemp(f"join-order-{request.param}")
    primary, other = _datasets(base, *EXCLUDES[request.param])
    path = _write(base, "j.yaml", V2 + TRAIN_JOIN.format(primary=primary, other=other))
    ea.prepare_metadataset(path)
    return path


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


VAL = [dict(), dict(workers=2), dict(workers=3, rank=1, world=2), dict(workers=2, limit=2)]


@pytest.mark.parametrize("case", VAL, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "plain")
def test_join_val_batches_in_energon_order(join_yaml, case):
    assert _keys(ea, join_yaml, "val", **case) == _keys(energon, join_yaml, "val", **case)


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
    base = tmp_path_factory.mktemp("join-names")
    entries = [f"shards/shard-00000{s}.tar/00000{s}_00000{i}" for s in range(3) for i in range(0, 8, 3)]
    primary, other = _datasets(base, ["shards/shard-000002.tar", *entries], entries[:4])
    path = _write(base, "j.yaml", V2 + TRAIN_JOIN.format(primary=primary, other=other))
    for seed in range(8):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        out = subprocess.run(
            [sys.executable, "-c", _NAMES, path], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip().splitlines()[-1] == "True", (seed, out.stdout[-500:])


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    """(primary with two sample excludes, other, plain)."""
    base = tmp_path_factory.mktemp("join-more")
    primary_excludes = ["shards/shard-000000.tar/000000_000002", "shards/shard-000001.tar/000001_000007"]
    return _datasets(base, primary_excludes, [], plain=True)


FORMS = {
    "subset": "  train:\n    subset: {{range: [10%, 80%]}}\n    " + JOIN,
    "multiplier": "  train:\n    shuffle_over_epochs_multiplier: 2\n    " + JOIN,
    "blend": """  train:
    blend:
      - weight: 2
        path: j.yaml
      - weight: 1
        path: {plain}
""",
    "blend_epochized": """  train:
    blend_epochized:
      - repetitions: 2
        path: j.yaml
      - repetitions: 1
        path: {plain}
""",
    "epochized_subset": """  train:
    blend_epochized:
      - repetitions: 2
        path: {plain}
        subset: {{range: [10%, 60%]}}
      - repetitions: 1.5
        path: {primary}
""",
    "val_blend": """  val:
    blend:
      - weight: 2
        path: j.yaml
        split_part: train
      - weight: 1
        path: {plain}
        split_part: train
""",
}


def _metadataset(roots, tmp_path, form: str) -> str:
    """`m.yaml` of FORMS[form], next to `j.yaml` (the plain join) that the blends name; both prepared."""
    primary, other, plain = roots
    ea.prepare_metadataset(_write(tmp_path, "j.yaml", V2 + TRAIN_JOIN.format(primary=primary, other=other)))
    path = _write(tmp_path, "m.yaml", V2 + FORMS[form].format(primary=primary, other=other, plain=plain))
    ea.prepare_metadataset(path)
    return path


@pytest.mark.parametrize("form", ["subset", "multiplier", "blend", "blend_epochized", "epochized_subset"])
@pytest.mark.parametrize(
    "case",
    [
        dict(shuffle_buffer_size=3, max_samples_per_sequence=2, workers=2),
        dict(shuffle_buffer_size=None, max_samples_per_sequence=None, workers=0, rank=1, world=2),
    ],
)
def test_join_forms_in_energon_order(roots, form, case, tmp_path):
    path = _metadataset(roots, tmp_path, form)

    def keys(mod):
        if form != "blend":
            return _keys(mod, path, "train", **case)
        batches = mod.get_loader(_dataset(mod, path, "train", **case))  # endless: a weighted blend repeats
        return [k for b in itertools.islice(batches, 40) for k in b.__key__]

    ours, ref = keys(ea), keys(energon)
    assert ours == ref and ours


def test_a_joins_own_multiplier_is_reported_as_without_effect(roots, tmp_path):
    with pytest.warns(UserWarning, match=r"m\.yaml.*shuffle_over_epochs_multiplier on a join has no effect"):
        _metadataset(roots, tmp_path, "multiplier")


@pytest.mark.parametrize("workers", [0, 2])
def test_join_in_a_val_blend_with_energon_sources(roots, tmp_path, workers):
    """Every member's SourceInfo.index is the joined row's position, as energon's join index gives it."""
    path = _metadataset(roots, tmp_path, "val_blend")

    def run(mod):
        ds = _dataset(mod, path, "val", workers=workers)
        return len(ds), [
            (k, tuple(_src(x) for x in s))
            for b in mod.get_loader(ds)
            for k, s in zip(b.__key__, b.__sources__)
        ]

    assert run(ea) == run(energon)


def test_join_train_sources_in_energon_order_and_restored(roots, tmp_path):
    """energon 7.4.1 itself fails to restore this state (its sample loader's restore_sample cannot unpack a
    joined restore key), so our restored batches are checked against the uninterrupted run."""
    primary, other, _ = roots
    path = _write(tmp_path, "j.yaml", V2 + TRAIN_JOIN.format(primary=primary, other=other))
    ea.prepare_metadataset(path)
    kw = dict(workers=2, shuffle_buffer_size=4, max_samples_per_sequence=3)

    def run(mod):
        loader = mod.get_savable_loader(_dataset(mod, path, "train", **kw))
        it = iter(loader)
        first = [
            (b.__key__, [tuple(_src(x) for x in s) for s in b.__sources__]) for b in itertools.islice(it, 5)
        ]
        state = loader.save_state_rank()
        return first, [b.__key__ for b in itertools.islice(it, 6)], state

    ours, ref = run(ea), run(energon)
    assert ours[:2] == ref[:2]
    loader = ea.get_savable_loader(_dataset(ea, path, "train", **kw))
    loader.restore_state_rank(ours[2])
    assert [b.__key__ for b in itertools.islice(iter(loader), 6)] == ours[1]


@pytest.mark.parametrize("form", ["plain", "subset"])
@pytest.mark.parametrize("split", ["train", "val"])
def test_join_config_as_energon_reports_it(roots, tmp_path, form, split):
    """`config()`: the join's factory, its members as their own factories (the primary's class, its sample
    excludes in energon's set order), the join's `subset:` and energon's `load_sample`."""
    primary, other, _ = roots
    text = TRAIN_JOIN if form == "plain" else FORMS["subset"]
    path = _write(tmp_path, "j.yaml", V2 + text.format(primary=primary, other=other))
    ea.prepare_metadataset(path)
    kw = (
        dict(split_part="train")
        if split == "val"
        else dict(shuffle_buffer_size=4, max_samples_per_sequence=3)
    )

    def config(mod):  # one process: energon's set orders are this process's
        return json.loads(json.dumps(_dataset(mod, path, split, workers=2, **kw).config(), default=str))

    assert config(ea) == config(energon)


@pytest.mark.parametrize("excludes", list(EXCLUDES))
@pytest.mark.parametrize("form", ["plain", "subset"])
def test_join_index_file_is_energons(tmp_path, excludes, form):
    """The join index `prepare_metadataset` writes is the file energon's prepare writes: same name (same
    process), same bytes, with excludes in either member."""
    from megatron.energon.epathlib import EPath
    from megatron.energon.metadataset.loader import load_dataset

    primary, other = _datasets(tmp_path, *EXCLUDES[excludes])
    text = TRAIN_JOIN if form == "plain" else FORMS["subset"]
    path = _write(tmp_path, "j.yaml", V2 + text.format(primary=primary, other=other))
    (ours,) = ea.prepare_metadataset(path)
    with open(ours, "rb") as f:
        ours_bytes = f.read()
    os.remove(ours)
    load_dataset(EPath(path)).prepare(split_part="train")
    (ref,) = os.listdir(tmp_path / "j.yaml.cache")
    assert ref == os.path.basename(ours)
    assert (tmp_path / "j.yaml.cache" / ref).read_bytes() == ours_bytes
