"""`loader.config()` (energon's name): what defines the batches, equal for equal loaders, JSON-able."""

from __future__ import annotations

import json

from energon_arrow.energon.metadataset_sources import open_sources
from energon_arrow.loader.dataset import BatchDataset, LoaderSettings
from energon_arrow.loader.loader import Loader
from energon_arrow.samples.decoders import PartDecoder


def _loader(path, *, batch_size, shuffle_buffer_size):
    """The core Loader over the metadataset's sources (the energon API's loaders describe energon's pipeline
    instead: tests/energon/test_energon_config.py)."""
    opened = open_sources(path, "train")
    settings = LoaderSettings(
        global_batch_size=batch_size,
        seed=0,
        shuffle=True,
        repeat=True,
        shuffle_buffer=shuffle_buffer_size,
        source_over_epochs=tuple(opened.multipliers),
    )
    ds = BatchDataset(opened.sources, settings, weights=opened.weights, decoder=PartDecoder(raw=True))
    return Loader(ds, 0, device="cpu")


def test_config_describes_the_loader_and_its_datasets(tmp_path, prepared_root):
    mds = tmp_path / "m.yaml"
    mds.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        f"      - {{weight: 3, path: {prepared_root}, subflavors: {{a: 1}}, shuffle_over_epochs_multiplier: 2}}\n"
        f"      - {{weight: 1, path: {prepared_root}, split_part: val}}\n"
    )
    cfg = _loader(str(mds), batch_size=4, shuffle_buffer_size=8).config()
    assert json.loads(json.dumps(cfg)) == cfg
    assert cfg["type"] == "Loader" and cfg["num_workers"] == 0
    inner = cfg["dataset"]
    assert inner["batch_size"] == 4 and inner["settings"]["shuffle_buffer"] == 8
    assert [(d["samples"], d["weight"], d["subflavors"]) for d in inner["datasets"]] == [
        (120, 0.75, {"a": 1}),
        (40, 0.25, {}),
    ]
    assert (
        inner["datasets"][0]["shuffle_over_epochs"] == 2 and "shuffle_over_epochs" not in inner["datasets"][1]
    )
    assert _loader(str(mds), batch_size=4, shuffle_buffer_size=8).config() == cfg
    assert _loader(str(mds), batch_size=2, shuffle_buffer_size=8).config() != cfg
