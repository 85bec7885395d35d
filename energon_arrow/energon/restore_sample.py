"""`restore_sample(restore_key)` for the loaders of `get_loader` / `get_savable_loader` over our fast core.

energon prefixes the restore key of every item its loader yields with where it was made (worker, sample index)
and rebuilds the item from the key by re-reading its samples and re-running the task encoder. Here an item is
made from chunks (this rank's slice of a global batch of the sample order, loader/dataset.py), so the loader
prefixes the item's own restore key (the tuple of its samples' `("Webdataset", shard, index)` keys, or the
sample's key when unbatched) with the chunk position:

- one batch per chunk:  `("BasicLoader", "chunk", b, *item_key)`: the batch of chunk b;
- regrouped (stream mode, energon/regroup.py): `("BasicLoader", "stream", batch, output, refs, *item_key)`:
  output `output` of the batch with index `batch` (unbatched: the output's own index) formed from the encoded
  samples `refs` (`((chunk, index in the chunk's encoded samples), ...)`).

Restoring re-reads those chunks and re-runs the hooks with the same (chunk, slot) seeds, so hooks marked
`@stateless(restore_seeds=True)` reproduce their randomness, as in energon (and, as energon's restore does, they
see the item's batch index). Items without a restore key (a
task encoder's batch type without `__restore_key__`) keep none and cannot be restored (as in energon).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from energon_arrow.energon.hooks import _marked as marked
from energon_arrow.energon.wrappers.base import add_sample_restore_key, get_sample_restore_key
from energon_arrow.images.slots import SlotAllocator
from energon_arrow.loader.errors import LoaderError
from energon_arrow.samples.stateless import get_stateless

KEY_ID = "BasicLoader"


class _Src:
    """Stands in for the loader as the `src` of add_sample_restore_key (whose class name is the key's id)."""


_Src.__name__ = KEY_ID
_SRC = _Src()


def tag_chunk_item(item: Any, b: int) -> Any:
    """`item` (the batch of chunk b) with its restore key prefixed by its chunk."""
    return add_sample_restore_key(item, "chunk", int(b), src=_SRC)


def tag_stream_item(item: Any, entry: list) -> Any:
    """`item` with its restore key prefixed by the regrouper queue `entry` it was drained from (the entry's
    consumed count is already past it)."""
    refs, _, consumed, index = entry
    return add_sample_restore_key(item, "stream", index, consumed - 1, _ref_key(refs), src=_SRC)


def _is_pack_ref(ref) -> bool:
    """A pack's ref ((sample refs ...), output index) rather than a sample's (chunk, index)."""
    return not isinstance(ref[0], (int, np.integer))


def _ref_key(refs) -> tuple:
    """Sample refs (chunk, index) and pack refs ((sample refs ...), k) as nested int tuples."""
    return tuple(
        (tuple((int(c), int(i)) for c, i in r[0]), int(r[1])) if _is_pack_ref(r) else (int(r[0]), int(r[1]))
        for r in refs
    )


def _rebuild_chunk(dataset, b: int) -> Any:
    """What the assembler makes of chunk b (a batch, or the encoded samples in stream mode), in this process
    and without the workers' shared image slots."""
    from energon_arrow.loader.reader import SampleReader

    plan = dataset.plan(b, dataset._caches())
    if not len(plan[1]):
        raise LoaderError(f"restore_sample: chunk {b} holds no samples of rank {dataset.rank}")
    readers = [SampleReader(src) for src in dataset.sources]
    saved = dataset.assembler.slots, dataset.assembler.device_normalize
    dataset.assembler.slots, dataset.assembler.device_normalize = SlotAllocator(None, 0), False
    try:
        out, _ = dataset.assembler.batch(b, plan, dataset._fetch(plan, readers), 0)
    finally:
        dataset.assembler.slots, dataset.assembler.device_normalize = saved
        for r in readers:
            r.close()
    return out


def _check_inner(item: Any, inner: tuple, restore_key: tuple) -> None:
    got = get_sample_restore_key(item)
    if got is None or tuple(got) != tuple(inner):
        raise LoaderError(
            f"restore_sample: {restore_key!r:.300} does not match this dataset: its position now holds "
            f"{got!r:.300} (was the dataset, its order or the task encoder changed?)"
        )


def _unmarked_hooks(dataset) -> list[str]:
    """The task-encoder hooks the loader calls that are not `@stateless` (energon restores only through
    stateless ones: their output depends on the sample alone)."""
    h = dataset.hooks
    te = h.te
    if te is None:
        return []
    fns = [h.pre, h.post, h.encode_batch_fn]
    if dataset.batch_size is not None:
        fns.append(te.batch)
    if any(b.crude for b in dataset.builders):
        fns.append(getattr(te, "cook_crude_sample", None))
    return [f.__name__ for f in fns if f is not None and not get_stateless(marked(f))]


def can_restore(loader) -> bool:
    return not _unmarked_hooks(loader.dataset)


def restore_item(loader, restore_key: tuple) -> Any:
    """The item (batch, or sample when unbatched) `loader` yielded with `restore_key`, made again."""
    unmarked = _unmarked_hooks(loader.dataset)
    if unmarked:
        raise LoaderError(
            f"restore_sample: the task encoder's {', '.join(unmarked)} not @stateless: mark them "
            "@stateless (with restore_seeds=True when random) to restore samples, as energon requires"
        )
    key = tuple(restore_key) if isinstance(restore_key, (tuple, list)) else None
    if not key or key[0] != KEY_ID or len(key) < 3 or key[1] not in ("chunk", "stream"):
        raise LoaderError(
            f"restore_sample: {restore_key!r:.300} is not a restore key of this loader (expected the "
            f"__restore_key__ of an item it yielded, starting with {KEY_ID!r})"
        )
    ds = loader.dataset
    if key[1] == "chunk":
        if loader.regroup is not None:
            raise LoaderError("restore_sample: a one-batch-per-chunk key given to a loader that regroups")
        b, inner = int(key[2]), key[3:]
        item = _rebuild_chunk(ds, b)
        if item is None:
            raise LoaderError(f"restore_sample: every sample of chunk {b} is skipped now")
        _check_inner(item, inner, key)
        return tag_chunk_item(item, b)
    if loader.regroup is None:
        raise LoaderError("restore_sample: a regrouped-batch key given to a loader that does not regroup")
    index, output, refs, inner = int(key[2]), int(key[3]), _ref_key(key[4]), key[5:]
    chunks: dict[int, list] = {}

    def sample(c: int, i: int) -> Any:
        if c not in chunks:
            with ds.hooks.restoring_samples(index):
                chunks[c] = _rebuild_chunk(ds, c) or []
        if i >= len(chunks[c]):
            raise LoaderError(
                f"restore_sample: sample {i} of chunk {c} does not exist now (the task encoder is not "
                "deterministic: mark random hooks @stateless(restore_seeds=True))"
            )
        return chunks[c][i]

    samples = []
    for ref in refs:
        if not _is_pack_ref(ref):
            samples.append(sample(*ref))
            continue
        group_refs, k = ref
        packer = loader.regroup.packer
        if packer is None:
            raise LoaderError(
                f"restore_sample: {restore_key!r:.300} holds packs, but this loader does not pack"
            )
        if not get_stateless(marked(packer.pack_fn)):
            raise LoaderError(
                "restore_sample: the task encoder's pack_selected_samples is not @stateless: mark it @stateless "
                "to restore packed samples, as energon requires"
            )
        packs = packer.pack(group_refs, [sample(*r) for r in group_refs], index)
        if k >= len(packs):
            raise LoaderError(f"restore_sample: pack {ref!r} now has {len(packs)} outputs, not {k + 1}")
        samples.append(packs[k])
    outputs = samples if loader.regroup.unbatched else ds.hooks.batches(samples, index)
    if output >= len(outputs):
        raise LoaderError(f"restore_sample: batch {index} now has {len(outputs)} outputs, not {output + 1}")
    item = outputs[output]
    _check_inner(item, inner, key)
    return add_sample_restore_key(item, "stream", index, output, refs, src=_SRC)
