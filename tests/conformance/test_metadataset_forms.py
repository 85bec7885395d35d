"""The same small training loop on energon 7.4.1 and on energon-arrow for each metadataset form: the same
per-epoch sample multiset (keys with their subflavors); where energon samples at random (weights, the fractional
part of a repetition) the same support and the same counts per dataset."""

from __future__ import annotations

import collections
import dataclasses

import pytest

import energon_arrow as ea
from energon_arrow.epathlib import EPath
from energon_arrow.testing.synthetic import write_webdataset
from tests.reference import energon_prepare

pytestmark = pytest.mark.conformance
energon = pytest.importorskip("megatron.energon")

V2 = "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n"
V1 = "__module__: megatron.energon\n__class__: Metadataset\nsplits:\n"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """4 shards x 30 samples prepared by energon: 90 train samples, 30 val samples."""
    path = str(tmp_path_factory.mktemp("mds-forms") / "ds")
    write_webdataset(path, shards=4, samples_per_shard=30, image_bytes=50)
    energon_prepare(path)
    return path


def _samples(mod, path, *, split="train", batches=None, batch=6, **kw):
    """(key, subflavors) of every sample: one epoch (repeat=False), `batches` batches, or the val split."""

    class TE(mod.DefaultTaskEncoder):
        decoder = None

    wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=0)
    if split == "val":
        ds = mod.get_val_dataset(path, worker_config=wc, batch_size=batch, task_encoder=TE(), **kw)
    else:
        ds = mod.get_train_dataset(
            path,
            worker_config=wc,
            batch_size=batch,
            task_encoder=TE(),
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            repeat=batches is not None,
            **kw,
        )
    it = iter(mod.get_loader(ds))
    out = []
    for i, b in enumerate(it):
        out += [(k, tuple(sorted((f or {}).items()))) for k, f in zip(b.__key__, b.__subflavors__)]
        if batches is not None and i + 1 == batches:
            break
    return out


def _same_epoch(path, **kw):
    ours, ref = _samples(ea, path, **kw), _samples(energon, path, **kw)
    assert collections.Counter(ours) == collections.Counter(ref)
    return ours


def _write(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


def test_blend_epochized_whole_repetitions(root, tmp_path):
    path = _write(
        tmp_path,
        "m.yaml",
        V2
        + f"""  train:
    blend_epochized:
      - {{repetitions: 1, path: {root}, subset: {{range: [0, 50]}}, subflavors: {{r: one}}}}
      - {{repetitions: 2, path: {root}, subset: {{range: [0, 50]}}, subflavors: {{r: two}}}}
""",
    )
    assert len(_same_epoch(path)) == 150


def test_blend_epochized_fractional_repetitions(root, tmp_path):
    path = _write(
        tmp_path,
        "m.yaml",
        V2
        + f"""  train:
    blend_epochized:
      - {{repetitions: 1.5, path: {root}, subset: {{range: [0, 20]}}, subflavors: {{d: a}}}}
      - {{repetitions: 0.25, path: {root}, subset: {{range: [20, 60]}}, subflavors: {{d: b}}}}
""",
    )

    def profile(samples):  # per dataset: samples, distinct keys, how often each count occurs
        out = {}
        for flavor in {f for _, f in samples}:
            c = collections.Counter(k for k, f in samples if f == flavor)
            out[flavor] = (sum(c.values()), len(c), sorted(collections.Counter(c.values()).items()))
        return out

    ours, ref = _samples(ea, path), _samples(energon, path)
    assert profile(ours) == profile(ref)
    assert len(ours) == 20 + 10 + 10


def test_subset_at_every_level(root, tmp_path):
    path = _write(
        tmp_path,
        "m.yaml",
        V2
        + f"""  train:
    subset: {{range: ["10%", "60%"]}}
    blend_epochized:
      - {{path: {root}, subset: {{range: [10, 70]}}, subflavors: {{d: abs}}}}
      - {{path: {root}, subset: {{range: ["50%", "100%"]}}, subflavors: {{d: rel}}}}
      - {{path: {root}, repetitions: 2, subflavors: {{d: none}}}}
""",
    )
    _same_epoch(path)


def test_subset_of_a_single_dataset_and_split_part(root, tmp_path):
    path = _write(
        tmp_path,
        "m.yaml",
        V2 + f"  val:\n    path: {root}\n    split_part: train\n    subset: {{range: [7, end]}}\n",
    )
    ours = _samples(ea, path, split="val", batch=8)
    assert ours == _samples(energon, path, split="val", batch=8)


def test_nested_metadatasets_with_subflavors(root, tmp_path):
    _write(
        tmp_path,
        "inner.yaml",
        V2
        + f"""  train:
    blend_epochized:
      - {{path: {root}, subset: {{range: [0, 40]}}, subflavors: {{level: inner, who: inner}}, repetitions: 2}}
      - {{path: {root}, split_part: val, subflavors: {{level: inner-val}}}}
""",
    )
    path = _write(
        tmp_path,
        "outer.yaml",
        V2
        + """  train:
    blend_epochized:
      - path: inner.yaml
        subset: {range: ["25%", "75%"]}
        subflavors: {who: outer}
        repetitions: 2
      - path: inner.yaml
        subflavors: {who: outer-2}
""",
    )
    _same_epoch(path, subflavors={"call": 1})


def _weighted(path, batches=50):
    ours, ref = _samples(ea, path, batches=batches), _samples(energon, path, batches=batches)
    assert set(ours) == set(ref)  # every sample of every dataset is drawn
    share = collections.Counter(f for _, f in ours)
    share_ref = collections.Counter(f for _, f in ref)
    for flavor, n in share_ref.items():
        assert abs(share[flavor] - n) <= 0.15 * len(ref)


def test_blend_weights(root, tmp_path):
    path = _write(
        tmp_path,
        "m.yaml",
        V2
        + f"""  train:
    blend:
      - {{weight: 2, path: {root}, subset: {{range: [0, 20]}}, subflavors: {{d: a}}}}
      - {{weight: 1, path: {root}, split_part: val, subflavors: {{d: b}}}}
""",
    )
    _weighted(path)


def test_metadataset_v1(root, tmp_path):
    path = _write(
        tmp_path,
        "v1.yaml",
        V1
        + f"""  train:
    datasets:
      - {{weight: 1, path: {root}, subflavor: legacy, subflavors: {{d: a}}}}
      - {{weight: 1, path: {root}, split_part: val, subflavors: {{d: b}}}}
""",
    )
    _weighted(path, batches=80)


def _cooked(mod, path, split):
    @mod.stateless
    def cook(sample):
        return mod.TextSample(
            __key__=sample["__key__"],
            __restore_key__=sample["__restore_key__"],
            __subflavors__=sample["__subflavors__"],
            text=sample["json"]["text"],
        )

    class TE(mod.DefaultTaskEncoder):
        cookers = [mod.Cooker(cook)]

    wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=0)
    if split == "val":
        ds = mod.get_val_dataset(path, worker_config=wc, batch_size=4, task_encoder=TE())
    else:
        ds = mod.get_train_dataset(
            path, worker_config=wc, batch_size=4, task_encoder=TE(), shuffle_buffer_size=None,
            max_samples_per_sequence=None, repeat=False,
        )  # fmt: skip
    return [(k, t) for b in mod.get_loader(ds) for k, t in zip(b.__key__, b.text)]


def test_jsonl_prepared_by_us_loads_the_same(tmp_path):
    from energon_arrow.index.jsonl_index import prepare_jsonl

    lines = [f'{{"text": "line {i}"}}' + ("\n" if i % 5 else "\n\n") for i in range(37)]
    (tmp_path / "d.jsonl").write_text("".join(lines))
    prepare_jsonl(str(tmp_path / "d.jsonl"))
    path = str(tmp_path / "d.jsonl")
    assert _cooked(ea, path, "val") == _cooked(energon, path, "val")
    mds = _write(
        tmp_path,
        "m.yaml",
        V2
        + "  train:\n    blend_epochized:\n      - {path: d.jsonl, repetitions: 2, subset: {range: [5, 30]}}\n",
    )
    ours, ref = _cooked(ea, mds, "train"), _cooked(energon, mds, "train")
    assert collections.Counter(ours) == collections.Counter(ref) and len(ours) == 50


def _crude_samples(mod, path, **kw):
    """Every key of the crude samples a cooker receives (val order), but energon's pipeline-specific
    __restore_key__."""
    seen = []

    @mod.stateless
    def keep(sample):
        seen.append({k: v for k, v in sample.items() if k != "__restore_key__"})
        return mod.TextSample(**mod.basic_sample_keys(sample), text="")

    class TE(mod.DefaultTaskEncoder):
        cookers = [mod.Cooker(keep)]

    wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=0)
    list(mod.get_loader(mod.get_val_dataset(path, worker_config=wc, batch_size=3, task_encoder=TE(), **kw)))
    return seen


@pytest.mark.parametrize(
    "form",
    [None, "    path: d.jsonl\n", "    path: d.jsonl\n    subflavors: {}\n",
     "    blend:\n      - {path: d.jsonl, subflavors: {a: 1}}\n"],
)  # fmt: skip
def test_jsonl_crude_samples_like_energons(tmp_path, form):
    """The crude JSONL samples (__key__, __shard__, __sources__, __subflavors__, json) equal energon's, loaded
    directly and from a metadataset with and without subflavors."""
    lines = [f'{{"text": "line {i}"}}' + ("\n" if i % 3 else "\n\n") for i in range(7)]
    (tmp_path / "d.jsonl").write_text("".join(lines))
    assert ea.CrudeJsonlDatasetFactory.prepare_dataset(tmp_path / "d.jsonl") == 7
    path, kw = str(tmp_path / "d.jsonl"), {}
    if form is not None:
        path, kw = _write(tmp_path, "m.yaml", V2 + "  train:\n" + form), {"split_part": "train"}
    ours, ref = _crude_samples(ea, path, **kw), _crude_samples(energon, path, **kw)
    assert len(ours) == 7
    for a, b in zip(ours, ref):
        assert a.keys() == b.keys()
        assert a["__sources__"] == tuple(ea.SourceInfo(*dataclasses.astuple(x)) for x in b["__sources__"])
        assert [a[k] for k in a if k != "__sources__"] == [b[k] for k in a if k != "__sources__"]


CLASS_STYLE = {
    "field_map": "__module__: megatron.energon\n__class__: CaptioningWebdataset\n"
    "field_map: {image: jpg, caption: txt}\nsubflavors: {style: class}\n",
    "sample_loader": "__module__: megatron.energon\n__class__: TextWebdataset\n"
    "sample_loader: sample_loader.py:sample_loader\npart_filter: sample_loader.py:part_filter\n",
}
SAMPLE_LOADER = (
    "def sample_loader(raw):\n    return dict(text=raw['txt'].upper())\n\n\n"
    "def part_filter(part):\n    return part == 'txt'\n"
)


@pytest.mark.parametrize("style", sorted(CLASS_STYLE))
def test_class_style_dataset_yaml(root, tmp_path, style):
    import shutil

    copy = str(tmp_path / "ds")
    shutil.copytree(root, copy)
    (tmp_path / "ds" / ".nv-meta" / "dataset.yaml").write_text(CLASS_STYLE[style])
    (tmp_path / "ds" / ".nv-meta" / "sample_loader.py").write_text(SAMPLE_LOADER)

    def batches(mod):
        class TE(mod.DefaultTaskEncoder):
            decoder = None  # the synthetic jpg parts are random bytes

        wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=0)
        ds = mod.get_val_dataset(copy, worker_config=wc, batch_size=7, task_encoder=TE())
        field = "caption" if style == "field_map" else "text"
        return [
            (type(b).__name__, b.__key__, getattr(b, field), b.__subflavors__) for b in mod.get_loader(ds)
        ]

    ours, ref = batches(ea), batches(energon)
    assert ours == ref and ours[0][0] == ("CaptioningSample" if style == "field_map" else "TextSample")


@pytest.fixture(scope="module")
def join_roots(tmp_path_factory):
    from tests.query.conftest import make_energon_dataset

    base = tmp_path_factory.mktemp("mds-join")
    primary = make_energon_dataset(str(base / "p"), shards=3, samples=8, seed=0, split_ratio="1,0,0")
    other = make_energon_dataset(str(base / "o"), shards=2, samples=8, seed=5, split_ratio="1,0,0")
    return primary, other


def test_join_loaded_like_energon(join_roots, tmp_path):
    """(nonmatch 'none' is not compared: energon 7.4.1 fails reading the missing member; see
    tests/energon/test_metadataset_join.py)"""
    primary, other = join_roots
    path = _write(
        tmp_path,
        "j.yaml",
        V2
        + f"""  train:
    subset: {{range: ["0%", "75%"]}}
    join:
      - path: {primary}
      - path: {other}
        nonmatch: skip
    joiner:
      __module__: megatron.energon
      __class__: TextSample
""",
    )
    # energon needs its join index (energon-arrow joins on load): ours must be the file energon looks for
    assert len(ea.prepare_metadataset(path)) == 1

    def run(mod, split):
        class TE(mod.DefaultTaskEncoder):
            decoder = None

        wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=0)
        if split == "val":
            ds = mod.get_val_dataset(
                path, split_part="train", worker_config=wc, batch_size=5, task_encoder=TE()
            )
        else:
            ds = mod.get_train_dataset(
                path, worker_config=wc, batch_size=5, task_encoder=TE(), shuffle_buffer_size=None,
                max_samples_per_sequence=None, repeat=False,
            )  # fmt: skip
        return [
            (k, t, len(s)) for b in mod.get_loader(ds) for k, t, s in zip(b.__key__, b.text, b.__sources__)
        ]

    ours = run(ea, "val")
    assert ours == run(energon, "val")
    assert len(ours) == 12  # 75% of the 16 primary samples that the other dataset has
    assert collections.Counter(run(ea, "train")) == collections.Counter(run(energon, "train"))


def test_traverse_metadataset_like_energon(root, tmp_path):
    _write(
        tmp_path,
        "inner.yaml",
        V2
        + f"""  train:
    blend:
      - {{path: {root}, subflavors: {{a: inner, b: inner}}, aux: {{media: {root}, files: "filesystem://media"}}}}
      - {{path: {root}, split_part: val}}
""",
    )
    path = _write(
        tmp_path,
        "outer.yaml",
        V2
        + """  train:
    blend:
      - {path: inner.yaml, subflavors: {b: outer}}
      - {path: inner.yaml, split_part: train, subset: {range: ["0%", "50%"]}}
""",
    )
    ours = ea.traverse_metadataset(path, split_part="train")
    ref = energon.traverse_metadataset(path, split_part="train")
    assert all(isinstance(p, EPath) for r in ours for p in [r.path, *r.aux.values()])  # like energon's
    assert [
        (str(r.path), r.split_part, r.subflavors, {k: str(v) for k, v in r.aux.items()}) for r in ours
    ] == [(str(r.path), r.split_part, r.subflavors, {k: str(v) for k, v in r.aux.items()}) for r in ref]


def test_aux_file_stores_in_cookers(root, tmp_path):
    import shutil

    crude = str(tmp_path / "crude")
    shutil.copytree(root, crude)
    (tmp_path / "crude" / ".nv-meta" / "dataset.yaml").write_text(
        "__module__: megatron.energon\n__class__: CrudeWebdataset\nsubflavors: {kind: crude}\n"
    )
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "note.txt").write_bytes(b"from the folder")
    path = _write(
        tmp_path,
        "m.yaml",
        V2 + f'  val:\n    path: crude\n    aux:\n      media: {root}\n      files: "filesystem://files"\n',
    )

    def run(mod):
        @mod.stateless
        def cook(sample, *, media, files):
            caption = media.get(sample["__key__"] + ".txt", sample)
            note = files.get("note.txt", sample)
            return mod.TextSample(
                __key__=sample["__key__"],
                __restore_key__=sample["__restore_key__"],
                __subflavors__=sample["__subflavors__"],
                text=f"{bytes(caption).decode()}|{bytes(note).decode()}",
            )

        class TE(mod.DefaultTaskEncoder):
            decoder = None
            cookers = [mod.Cooker(cook)]

        wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=0)
        ds = mod.get_val_dataset(path, worker_config=wc, batch_size=4, task_encoder=TE())
        return [
            (k, t, tuple(f.items()))
            for b in mod.get_loader(ds)
            for k, t, f in zip(b.__key__, b.text, b.__subflavors__)
        ]

    ours = run(ea)
    assert ours == run(energon) and ours[0][1].endswith("|from the folder")


def test_sources_of_a_subset_give_the_split_position(root, tmp_path):
    """`SourceInfo.index` of a sample read through a `subset` is its position in the split, not in the subset,
    on every path that builds samples: column-wise batches, per-sample batches (a task encoder hook), and the core
    dataset of `load_dataset(...).get_datasets(...)` factories."""
    path = _write(tmp_path, "s.yaml", V2 + f"  train:\n    path: {root}\n    subset: {{range: [40, 70]}}\n")

    def info(s):
        return (s.index, s.shard_name, s.file_names)

    def loader_sources(mod, per_sample):
        class TE(mod.DefaultTaskEncoder):
            decoder = None

            if per_sample:

                def encode_sample(self, sample):
                    return sample

        wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=0)
        ds = mod.get_val_dataset(path, split_part="train", worker_config=wc, batch_size=4, task_encoder=TE())
        return [(k, info(s[0])) for b in mod.get_loader(ds) for k, s in zip(b.__key__, b.__sources__)]

    def core_sources(mod):
        wc = mod.WorkerConfig(rank=0, world_size=1, num_workers=0)
        loaded = mod.load_dataset(path).get_datasets(
            training=False, split_part="train", worker_config=wc, decoder=None
        )
        return [(s.__key__, info(s.__sources__[0])) for s in loaded.datasets[0].dataset.build()]

    ref = loader_sources(energon, False)
    assert [i for _, (i, _, _) in ref] == list(range(40, 70))
    assert loader_sources(ea, False) == ref
    assert loader_sources(ea, True) == loader_sources(energon, True) == ref
    assert core_sources(ea) == ref  # (energon's core dataset only iterates inside its loader's workers)
