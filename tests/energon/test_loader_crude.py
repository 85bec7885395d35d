"""CrudeWebdataset with cookers selected by subflavors, aux sources, and the legacy sample_loader.py."""

from __future__ import annotations

import os

import fsspec
import pytest

import energon_arrow as ea
from energon_arrow.loader.errors import LoaderError
from energon_arrow.testing.synthetic import write_webdataset
from tests.loader.conftest import first_batch, prepare, write_dataset_yaml

CRUDE_YAML = "__module__: megatron.energon\n__class__: CrudeWebdataset\nsubflavors: {kind: crude}\n"


def cook_text(sample):
    return ea.TextSample(
        __key__=sample["__key__"],
        __restore_key__=sample["__restore_key__"],
        __subflavors__=sample["__subflavors__"],
        text=sample["txt"].upper(),
    )


def cook_never(sample):
    raise AssertionError("subflavor filter should not pick this cooker")


JPG_AS_BYTES = ea.PartDecoder(handlers={"jpg": bytes})  # the synthetic jpg parts are random bytes


class CrudeTE(ea.DefaultTaskEncoder):
    decoder = JPG_AS_BYTES
    cookers = [
        ea.Cooker(cook_never, has_subflavors={"kind": "other"}),
        ea.Cooker(cook_text, has_subflavors={"kind": "crude"}),
    ]


def _aux_metadataset(tmp_path, path: str, media: str):
    """A MetadatasetV2 YAML under `tmp_path` whose train split is `path` with the aux source `media`."""
    mds = tmp_path / "mds.yaml"
    mds.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n"
        f"    path: {path}\n    aux:\n      media: {media}\n"
    )
    return mds


def test_cooker_chosen_by_subflavors(dataset_copy):
    write_dataset_yaml(dataset_copy, CRUDE_YAML)
    batch = first_batch(dataset_copy, CrudeTE(), workers=1)
    assert type(batch).__name__ == "TextSample"
    assert all(t.startswith("SAMPLE ") for t in batch.text)
    assert batch.__subflavors__[0] == {"kind": "crude"}


def test_crude_without_matching_cooker(dataset_copy):
    write_dataset_yaml(dataset_copy, CRUDE_YAML)

    class TE(ea.DefaultTaskEncoder):
        decoder = JPG_AS_BYTES
        cookers = [ea.Cooker(cook_never, has_subflavors={"kind": "other"})]

    with pytest.raises(LoaderError, match="no cooker matches subflavors"):
        first_batch(dataset_copy, TE())


def test_aux_source_from_metadataset(dataset_copy, prepared_root, tmp_path):
    write_dataset_yaml(dataset_copy, CRUDE_YAML)

    def cook_with_aux(sample, *, media):
        caption = media.get(sample["__key__"] + ".txt", sample)
        return ea.CaptioningSample(
            __key__=sample["__key__"],
            __restore_key__=sample["__restore_key__"],
            image=sample["jpg"],
            caption=caption,
        )

    class TE(ea.DefaultTaskEncoder):
        decoder = None
        cookers = [ea.Cooker(cook_with_aux)]

    mds = _aux_metadataset(tmp_path, os.path.relpath(dataset_copy, tmp_path), prepared_root)
    batch = first_batch(str(mds), TE())
    assert all(c.startswith(b"sample ") for c in batch.caption)

    def cook_missing(sample, *, media):
        return media.get(sample["__key__"] + ".png")

    class Missing(ea.DefaultTaskEncoder):
        decoder = JPG_AS_BYTES
        cookers = [ea.Cooker(cook_missing)]

    with pytest.raises(LoaderError, match=r"no part or sample named '\d+_\d+\.png'"):
        first_batch(str(mds), Missing())


def test_aux_stores_decode_with_the_task_encoders_decoder(dataset_copy, prepared_root, tmp_path):
    """As in energon, the stores a cooker gets decode with the task encoder's decoder (decoder=None above: bytes),
    `primary` takes '.part' names relative to the cooked sample, and a cache pool decodes when the entry is used."""
    write_dataset_yaml(dataset_copy, CRUDE_YAML)

    @ea.cooker(need_primary=True, need_cache=True)
    def cook(sample, *, media, primary, cache):
        lazy = cache.get_lazy(media, sample["__key__"] + ".txt")
        own, other = primary.get(".txt"), media.get(sample["__key__"] + ".txt", sample)
        return ea.TextSample(**ea.basic_sample_keys(sample), text=(own, other, lazy.get(sample)))

    class TE(ea.DefaultTaskEncoder):
        decoder = JPG_AS_BYTES
        cookers = [ea.Cooker(cook)]

    mds = _aux_metadataset(tmp_path, os.path.relpath(dataset_copy, tmp_path), prepared_root)
    wc = ea.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = ea.get_train_dataset(str(mds), worker_config=wc, batch_size=2, task_encoder=TE())
    pool = ea.FileStoreCachePool(parent_cache_dir=tmp_path, num_workers=1)
    batch = next(iter(ea.get_savable_loader(ds, cache_pool=pool)))
    own, other, cached = batch.text[0]
    assert own == other == cached and isinstance(own, str) and own.startswith("sample ")
    pool.close()


SAMPLE_LOADER = """
def sample_loader(raw):
    return dict(text=raw["txt"] + "!")

def part_filter(part):
    return part == "txt"
"""


SAMPLE_LOADER_YAML = (
    "sample_type: {__module__: megatron.energon, __class__: TextSample}\n"
    "sample_loader: sample_loader.py:sample_loader\npart_filter: sample_loader.py:part_filter\n"
)


def _with_sample_loader(root):
    write_dataset_yaml(root, SAMPLE_LOADER_YAML)
    with open(f"{root}/.nv-meta/sample_loader.py", "w") as f:
        f.write(SAMPLE_LOADER)


def test_sample_loader_runs_for_local_datasets(dataset_copy):
    _with_sample_loader(dataset_copy)
    batch = first_batch(dataset_copy, None)
    assert type(batch).__name__ == "TextSample" and all(t.endswith("!") for t in batch.text)


def test_remote_code_needs_trust(memory_root):
    url, _ = memory_root
    write_webdataset(url, shards=2, samples_per_shard=10, image_bytes=50)
    prepare(url, split_ratio="1,0,0")
    fs = fsspec.filesystem("memory")
    fs.pipe(f"{url}/.nv-meta/dataset.yaml", SAMPLE_LOADER_YAML.encode())
    fs.pipe(f"{url}/.nv-meta/sample_loader.py", SAMPLE_LOADER.encode())
    with pytest.raises(
        LoaderError, match="remote code is not executed unless you pass trust_remote_code=True"
    ):
        first_batch(url, None)
    batch = first_batch(url, None, trust_remote_code=True)
    assert all(t.endswith("!") for t in batch.text)


def test_cookers_read_media_metadata_of_primary_and_aux(tmp_path):
    """energon's use of media metadata: a cooker asks the primary dataset and an aux folder (prepare-media)."""
    pytest.importorskip("av")
    from energon_arrow.adapters import open_storage
    from energon_arrow.index.media_extract import MediaFilterConfig
    from energon_arrow.index.media_prepare import prepare_media
    from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
    from energon_arrow.testing.media import image_bytes, write_media_webdataset

    by_extension = MediaFilterConfig.parse(None, False, True)
    root, folder = str(tmp_path / "ds"), tmp_path / "aux"
    write_media_webdataset(root, shards=1)
    prepare_dataset(
        root, PrepareOptions(split_ratio=[("train", 1.0)], num_workers=1, media_filter=by_extension)
    )
    write_dataset_yaml(root, CRUDE_YAML)
    folder.mkdir()
    (folder / "logo.png").write_bytes(image_bytes("PNG", (9, 4)))
    prepare_media(open_storage(str(folder)), by_extension, workers=1)

    @ea.cooker(need_primary=True)
    def cook(sample, *, primary, media):
        part = next(p for p in ("jpg", "png", "JPG", "mp4", "gif") if p in sample)
        md = primary.get_media_metadata(f"{sample['__key__']}.{part}")
        size = media.get_media_metadata("logo.png")
        return ea.TextSample(
            **ea.basic_sample_keys(sample), text=f"{part}:{md.to_dict()}:{size.width}x{size.height}"
        )

    class TE(ea.DefaultTaskEncoder):
        decoder = None
        cookers = [ea.Cooker(cook)]

    mds = _aux_metadataset(tmp_path, root, folder)
    texts = first_batch(str(mds), TE(), shuffle_buffer_size=None, max_samples_per_sequence=None).text
    assert "jpg:{'width': 32, 'height': 16, 'format': 'JPEG', 'mode': 'RGB'}:9x4" in texts
    assert any(t.startswith("mp4:{'video_duration'") for t in texts) and all(
        t.endswith(":9x4") for t in texts
    )
