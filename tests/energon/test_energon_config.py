"""`loader.config()` / `dataset.config()` of the energon API: energon's nested description of the pipeline it
runs for the same call (energon/pipeline_config.py); tests/conformance/test_config_energon.py compares it with
energon 7.4.1's own on many calls."""

from __future__ import annotations

import energon_arrow as ea

TE = "megatron.energon.task_encoder.base.DefaultTaskEncoder"
WDS = "megatron.energon.flavors.webdataset"


def _wc(workers=0):
    return ea.WorkerConfig(rank=0, world_size=1, num_workers=workers, seed_offset=42)


def _chain(cfg: dict) -> list[str]:
    """The types from the outermost stage down the `dataset` chain."""
    out = []
    while isinstance(cfg, dict):
        out.append(cfg["type"])
        cfg = cfg.get("dataset")
    return out


def test_metadataset_blend_as_energon_describes_it(tmp_path, prepared_root):
    mds = tmp_path / "m.yaml"
    mds.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        f"      - {{weight: 1, path: {prepared_root}, subflavors: {{a: 1}}, shuffle_over_epochs_multiplier: 3}}\n"
        f"      - {{weight: 1, path: {prepared_root}, split_part: val}}\n"
    )
    ds = ea.get_train_dataset(
        str(mds),
        worker_config=_wc(),
        batch_size=10,
        parallel_shard_iters=2,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        shuffle_over_epochs_multiplier=2,
    )
    cfg = ea.get_savable_loader(ds).config()
    wc = _wc().config()
    assert {k: v for k, v in cfg.items() if k != "dataset"} == {
        "type": "SavableDataLoader",
        "num_workers": 0,
        "persistent_workers": False,
        "pin_memory": True,
        "prefetch_factor": None,
    }
    assert _chain(cfg) == ["SavableDataLoader", "MapDataset", "BatchDataset", "MapDataset", "BlendDataset"]
    assert cfg["dataset"]["map_fn"] == f"{TE}.encode_batch"
    batch = cfg["dataset"]["dataset"]
    assert (batch["batcher"], batch["batcher_stateless"], batch["worker_config"]) == (f"{TE}.batch", True, wc)
    assert batch["dataset"]["map_fn"] == f"{TE}.encode_sample"
    blend = batch["dataset"]["dataset"]
    (first, w1), (second, w2) = blend["dataset_weights"]
    assert (w1, w2) == (0.5, 0.5) and _chain(first) == [
        "RepeatDataset",
        "MapDataset",
        "WebdatasetSampleLoaderDataset",
    ]
    loader, factory = first["dataset"]["dataset"], first["dataset"]["map_fn_config"]
    assert first["dataset"]["map_fn"] == f"{WDS}.base_webdataset.BaseWebdatasetFactory._load_sample_raw"
    assert loader == {
        "type": "WebdatasetSampleLoaderDataset",
        "joins": 1,
        "len": 120,
        "slice_offsets": [[0, 40, 80, 120]],
        "worker_config": wc,
        "shuffle_over_epochs": 6,
        "parallel_slice_iters": 2,
    }
    assert factory["type"] == "StandardWebdatasetFactory" and factory["training"] is True
    assert [(s["name"], s["count"]) for s in factory["shards"]] == [
        (f"shards/shard-00000{i}.tar", 40) for i in range(3)
    ]
    assert factory["subflavors"] == {"a": 1} and factory["parallel_shard_iters"] == 2
    assert factory["sample_loader"].endswith("DefaultGenericWebdatasetFactory.__init__.<locals>.<lambda>")
    assert second["dataset"]["dataset"]["shuffle_over_epochs"] == 2
    assert ds.config() == cfg["dataset"]


def test_plain_dataset_with_workers_buffer_and_virtual_epoch(prepared_root):
    ds = ea.get_train_dataset(
        prepared_root,
        worker_config=_wc(2),
        batch_size=4,
        shuffle_buffer_size=8,
        max_samples_per_sequence=25,
        virtual_epoch_length=5,
    )
    cfg = ea.get_loader(ds).config()
    assert cfg["type"] == "BasicDataLoader" and cfg["persistent_workers"] and cfg["prefetch_factor"] == 2
    assert _chain(cfg)[1:] == [
        "EpochizeDataset", "MapDataset", "BatchDataset", "MapDataset", "ShuffleBufferDataset", "RepeatDataset",
        "MapDataset", "WebdatasetSampleLoaderDataset",
    ]  # fmt: skip
    loader = cfg["dataset"]["dataset"]["dataset"]["dataset"]["dataset"]["dataset"]["dataset"]["dataset"]
    assert loader["slice_offsets"] == [[0, 20, 40, 60], [60, 80, 100, 120]]
    assert (loader["len"], loader["parallel_slice_iters"]) == (120, 16)


def test_val_with_limit_and_unbatched(prepared_root):
    cfg = ea.get_val_dataset(prepared_root, worker_config=_wc(1), batch_size=4, limit=3).config()
    assert _chain(cfg) == [
        "LimitDataset",
        "MapDataset",
        "BatchDataset",
        "MapDataset",
        "MapDataset",
        "WebdatasetSampleLoaderDataset",
    ]
    assert (cfg["length"], cfg["reset_after_epoch"]) == (3, True)
    core = cfg["dataset"]["dataset"]["dataset"]["dataset"]
    assert core["map_fn_config"]["training"] is False and core["map_fn_config"]["shuffle_over_epochs"] == 1
    assert core["dataset"]["shuffle_over_epochs"] is None and core["dataset"]["parallel_slice_iters"] == 1
    unbatched = ea.get_val_dataset(prepared_root, worker_config=_wc(), batch_size=None).config()
    assert _chain(unbatched) == ["MapDataset", "MapDataset", "WebdatasetSampleLoaderDataset"]


class _Packing(ea.DefaultTaskEncoder):
    def select_samples_to_pack(self, samples):
        return [samples]

    def pack_selected_samples(self, samples):
        return samples[0]


def test_packing_names_the_users_packer(prepared_root):
    ds = ea.get_train_dataset(
        prepared_root,
        worker_config=_wc(),
        batch_size=2,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=_Packing(),
        packing_buffer_size=6,
    )
    packing = ds.config()["dataset"]["dataset"]  # under encode_batch and the batching
    assert packing["type"] == "PackingDataset" and packing["buffer_size"] == 6
    assert packing["pre_packer"] == f"{__name__}._Packing.select_samples_to_pack"
    assert packing["final_packer"] == f"{__name__}._Packing.pack_selected_samples"
    assert packing["final_packer_stateless"] is False
