"""energon's PackingDataset wrapper: selection per window, encoding, packing, restore of packs and mid-window
resume."""

from __future__ import annotations

import json

import pytest

import energon_arrow as ea
from tests.energon.wrappers.conftest import VAL_KEYS, core, keys_of, wc
from tests.energon.wrappers.test_savable import _stream, _take_keys


def _pairs_drop_last(samples):
    """Pairs of consecutive samples; an odd last sample is not selected (dropped, as energon drops it)."""
    return [samples[i : i + 2] for i in range(0, len(samples) - 1, 2)]


def _tag(sample):
    return ea.TextSample.derive_from(sample, text=sample.__key__.upper())


def _join(samples):
    return ea.TextSample(
        __key__=[s.__key__ for s in samples],
        __restore_key__=(),
        text="+".join(s.text for s in samples),
    )


def _packed(root, c, buffer_size=5):
    return ea.PackingDataset(
        core(root, c, "val"),
        buffer_size,
        _pairs_drop_last,
        _join,
        final_packer_stateless=True,
        sample_encoder=_tag,
        sample_encoder_stateless=True,
        worker_config=c,
    )


def test_windows_are_selected_encoded_and_packed(prepared_root):
    ds = _packed(prepared_root, wc())
    loader = ea.get_loader(ds)
    packs = list(loader)
    # windows of 5: keys 0-4 -> (0,1), (2,3); 4 dropped; 5-9 -> (5,6), (7,8); ...
    expected = [[VAL_KEYS[w + i], VAL_KEYS[w + i + 1]] for w in range(0, 40, 5) for i in (0, 2)]
    assert [keys_of(p) for p in packs] == expected
    assert packs[0].text == f"{VAL_KEYS[0].upper()}+{VAL_KEYS[1].upper()}"
    assert len(ds) == 40  # energon: len() of a packing dataset is the unpacked count
    restored = loader.restore_sample(packs[3].__restore_key__)  # the loader's key names its worker first
    assert keys_of(restored) == expected[3] and restored.text == packs[3].text
    assert ds.config()["buffer_size"] == 5


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_window_equals_uninterrupted(prepared_root, workers):
    total, cut = 24, 7
    full = _take_keys(_stream(ea.get_savable_loader(_packed(prepared_root, wc(workers)))), total)
    loader = ea.get_savable_loader(_packed(prepared_root, wc(workers)))
    it = _stream(loader)
    first = _take_keys(it, cut)
    state = json.loads(json.dumps(loader.save_state_rank()))
    resumed = ea.get_savable_loader(_packed(prepared_root, wc(workers)))
    resumed.restore_state_rank(state)
    assert first + _take_keys(_stream(resumed), total - cut) == full


def test_bad_arguments_and_foreign_selection(prepared_root):
    with pytest.raises(ValueError, match="buffer_size must be >= 1"):
        ea.PackingDataset(core(prepared_root, wc(), "val"), 0, _pairs_drop_last, _join, worker_config=wc())

    def gen_packer(samples):
        yield samples

    with pytest.raises(ValueError, match="final_packer .* must return its result"):
        ea.PackingDataset(
            core(prepared_root, wc(), "val"), 4, _pairs_drop_last, gen_packer, worker_config=wc()
        )
    stateful = ea.PackingDataset(
        core(prepared_root, wc(), "val"), 4, _pairs_drop_last, _join, worker_config=wc()
    )
    with pytest.raises(ValueError, match="must be stateless to restore packs"):
        stateful.restore_sample(("PackingDataset", 0))
    copies = ea.PackingDataset(
        core(prepared_root, wc(), "val"),
        4,
        lambda samples: [[ea.TextSample.derive_from(samples[0], text="x")]],
        _join,
        pre_packer_failure_tolerance=1,
        worker_config=wc(),
    )
    with pytest.raises(ea.FatalSampleError, match="failed 1 times"):
        list(copies)
