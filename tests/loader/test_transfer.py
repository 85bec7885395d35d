"""The host-to-device stage: the CPU path returns batches unchanged and silently; the CUDA path when present."""

from __future__ import annotations

import warnings

import pytest
import torch

from energon_arrow.loader.transfer import (
    DeviceTransfer,
    iter_to_device,
    replace_leaves,
    sent_part,
    tensor_leaves,
)


def _batch(i: int) -> dict:
    return {
        "tokens": torch.arange(12, dtype=torch.int64).reshape(3, 4) + i,
        "nested": [torch.full((2,), float(i)), ("label", torch.tensor([i]))],
        "__key__": [f"k{i}", f"k{i + 1}"],
    }


def test_leaves_roundtrip_keeps_structure():
    b = _batch(1)
    leaves = tensor_leaves(b)
    assert [tuple(t.shape) for t in leaves] == [(3, 4), (2,), (1,)]
    doubled = replace_leaves(b, [t * 2 for t in leaves])
    assert doubled["__key__"] == ["k1", "k2"]
    assert doubled["nested"][1][0] == "label"
    assert torch.equal(doubled["tokens"], b["tokens"] * 2)


def test_leaves_of_dataclass_batches():
    from energon_arrow.samples.types import CaptioningSample

    b = CaptioningSample(
        __key__=["a"], __restore_key__=(("W", "s", 0),), image=torch.ones(1, 2), caption=["c"]
    )
    assert [tuple(t.shape) for t in tensor_leaves(b)] == [(1, 2)]
    out = replace_leaves(b, [torch.zeros(1, 2)])
    assert isinstance(out, CaptioningSample) and float(out.image.sum()) == 0 and out.caption == ["c"]


def test_cpu_path_has_no_pinning_and_no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        transfer = DeviceTransfer("cpu")
        assert not transfer.enabled
        out = list(iter_to_device((_batch(i) for i in range(5)), device="cpu"))
    assert [int(b["nested"][1][1]) for b in out] == list(range(5))
    assert all(not t.is_pinned() for b in out for t in tensor_leaves(b)) or torch.cuda.is_available()


def test_default_device_without_cuda_stays_on_host():
    if torch.cuda.is_available():
        pytest.skip("machine has CUDA")
    out = list(iter_to_device([_batch(0)]))
    assert out[0]["tokens"].device.type == "cpu"
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        DeviceTransfer("cuda")


def test_batch_broadcast_leaves_send_one_row():
    mask = torch.tril(torch.ones(8, 8, dtype=torch.bool))[None, None].expand(4, 1, 8, 8)
    tokens = torch.arange(12).reshape(4, 3)
    assert sent_part(mask).shape == (1, 1, 8, 8) and torch.equal(sent_part(mask).expand(mask.shape), mask)
    assert sent_part(tokens) is tokens
    single = mask[:1]
    assert sent_part(single) is single


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_path_copies_through_pinned_buffers_in_order():
    batches = [_batch(i) for i in range(6)]
    for b in batches:
        b["position_ids"] = torch.arange(5)[None].expand(len(b["tokens"]), 5)
    out = list(iter_to_device(iter(batches), device="cuda", depth=2))
    torch.cuda.synchronize()
    for src, dst in zip(batches, out):
        assert dst["tokens"].is_cuda and torch.equal(dst["tokens"].cpu(), src["tokens"])
        assert dst["position_ids"].is_cuda and torch.equal(dst["position_ids"].cpu(), src["position_ids"])
        assert dst["__key__"] == src["__key__"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_large_pageable_leaves_arrive_whole():
    """Large pageable leaves (odd sizes, another dtype, a non-contiguous one) through the rotating pinned buffers:
    every device batch equals its host batch, also when the host tensors are rewritten right after each batch
    was started (the staging copy is done when `start` returns)."""
    mib = 1 << 20
    host = {
        "big": torch.randint(0, 255, (48 * mib + 77,), dtype=torch.uint8),
        "floats": torch.randn(20 * mib + 3),
        "strided": torch.arange(8 * mib, dtype=torch.int64).reshape(2, -1).t(),
    }
    transfer = DeviceTransfer("cuda", depth=2)
    expected, outs = [], []
    for _ in range(5):
        handle = transfer.start(host)
        expected.append({k: v.clone() for k, v in host.items()})
        for v in host.values():
            v.add_(1)  # the next batch, written into the same host memory
        outs.append(transfer.finish(handle))
    torch.cuda.synchronize()
    for want, got in zip(expected, outs):
        for k, v in want.items():
            assert got[k].is_cuda and torch.equal(got[k].cpu(), v), k
