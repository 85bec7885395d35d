"""Helpers for the wrapper tests: core datasets over the loader tests' prepared dataset (4 shards x 40 samples,
train = shards 0-2 (120 samples), val = shard 3 (40 samples)); payloads stay raw bytes (decoder=None)."""

from __future__ import annotations

import energon_arrow as ea


def wc(workers: int = 0, rank: int = 0, world_size: int = 1):
    return ea.WorkerConfig(rank=rank, world_size=world_size, num_workers=workers)


_FACTORIES: dict = {}


def core(root: str, config, split: str = "val", training: bool = False, **kw):
    """A fresh core dataset; the factory (the opened split) is reused across tests to keep them fast."""
    key = (
        root,
        split,
        training,
        config.rank,
        config.world_size,
        config.num_workers,
        tuple(sorted(kw.items())),
    )
    if key not in _FACTORIES:
        _FACTORIES[key] = ea.get_dataset_from_config(
            root, split_part=split, training=training, worker_config=config, decoder=None, **kw
        )
    factory = _FACTORIES[key]
    factory.worker_config = config  # equal values; the wrappers compare it with theirs
    return factory.build()


def keys_of(item) -> list[str]:
    key = item.__key__
    return list(key) if isinstance(key, (list, tuple)) else [key]


def take(iterator, n: int) -> list:
    return [next(iterator) for _ in range(n)]


VAL_KEYS = [f"000003_{i:06d}" for i in range(40)]
TRAIN_KEYS = sorted(f"{s:06d}_{i:06d}" for s in range(3) for i in range(40))
