"""Batching rules against energon 7.4.1's: generic_batch, Batch.from_samples / derive_from, concatenation."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import pytest
import torch

import energon_arrow as ea
from energon_arrow.samples import batch_samples

energon = pytest.importorskip("megatron.energon")


class Pair(NamedTuple):
    left: torch.Tensor
    right: str


@dataclasses.dataclass
class Plain:
    x: torch.Tensor
    name: str


def _same(a, b) -> bool:
    """Structural equality with exact tensor comparison (dtype and shape included)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if dataclasses.is_dataclass(a):
        fa, fb = dataclasses.fields(a), dataclasses.fields(b)
        return [f.name for f in fa] == [f.name for f in fb] and all(
            _same(getattr(a, f.name), getattr(b, f.name)) for f in fa
        )
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _values():
    return [
        {
            "img": torch.arange(6, dtype=torch.int16).reshape(2, 3) + i,
            "var": torch.ones(i + 1, 2 - i % 2),
            "txt": f"t{i}",
            "nested": {
                "pair": Pair(torch.full((2,), float(i)), str(i)),
                "plain": Plain(torch.tensor([i]), "p"),
            },
            "none": None,
        }
        for i in range(3)
    ]


def test_generic_batch_matches_energon():
    ours = ea.generic_batch(_values())
    ref = energon.generic_batch(_values())
    assert _same(ours, ref)
    assert ours["var"].shape == (3, 3, 2) and float(ours["var"][0, 1, 0]) == 0.0  # zero-padded
    assert ours["nested"]["pair"].right == ["0", "1", "2"]


def test_batch_helpers_match_energon():
    ts = [torch.ones(2, 1), torch.full((1, 3), 2.0)]
    assert _same(ea.batch_pad_stack(ts), energon.batch_pad_stack(ts))
    eq = [torch.ones(2), torch.zeros(2)]
    assert _same(ea.batch_stack(eq), energon.batch_stack(eq))
    assert ea.batch_list(["a", "b"]) == energon.batch_list(["a", "b"])


def _samples(mod, n=3):
    return [
        mod.CaptioningSample(
            __key__=f"k{i}",
            __restore_key__=("W", "s.tar", i),
            __subflavors__={"s": i} if i else None,
            __sources__=(f"src{i}",) if i != 1 else None,
            image=torch.ones(3, 2, 2 + i),
            caption=f"c{i}",
        )
        for i in range(n)
    ]


@ea.edataclass
class OursBatch(ea.Batch):
    image: list
    caption: list


@energon.edataclass
class RefBatch(energon.Batch):
    image: list
    caption: list


def test_batch_from_samples_matches_energon():
    ours = OursBatch.from_samples(_samples(ea))
    ref = RefBatch.from_samples(_samples(energon))
    assert _same(ours, ref)
    assert ours.__subflavors__ == [{"s": 1}, {"s": 2}] and ours.__sources__ == ("src0", "src2")
    assert isinstance(ours.image, list)  # energon 7.4.1 lists tensor fields in from_samples (no stacking)
    bare = [ea.TextSample(__key__="a", __restore_key__=(), text="x")]

    @ea.edataclass
    class TextBatch(ea.Batch):
        text: list

    only = TextBatch.from_samples(bare, text=["override"])
    assert only.__subflavors__ is None and only.__sources__ is None and only.text == ["override"]
    with pytest.raises(TypeError, match="dataclasses"):
        TextBatch.from_samples([{"text": "x"}])


def test_batch_derive_from_matches_energon():
    @ea.edataclass
    class Encoded(ea.Batch):
        n: int

    @energon.edataclass
    class RefEncoded(energon.Batch):
        n: int

    ours = Encoded.derive_from(OursBatch.from_samples(_samples(ea)), n=3)
    ref = RefEncoded.derive_from(RefBatch.from_samples(_samples(energon)), n=3)
    assert _same(ours, ref)
    with pytest.raises(TypeError):
        Encoded.derive_from(ours, n=1, __key__=["x"])  # energon: metadata comes from the base batch only


def test_generic_batch_uses_from_samples_of_batch_elements():
    batches = [OursBatch.from_samples(_samples(ea, 1)), OursBatch.from_samples(_samples(ea, 2))]
    merged = ea.generic_batch(batches)
    assert isinstance(merged, OursBatch) and merged.__key__ == [["k0"], ["k0", "k1"]]


def test_concat_matches_energon():
    def batches(mod):
        return [
            {"x": torch.ones(2, 3), "t": ["a", "b"], "p": Pair(torch.zeros(1, 1), "r")},
            {"x": torch.full((1, 4), 2.0), "t": ["c"], "p": Pair(torch.ones(2, 2), "s")},
        ]

    assert _same(ea.generic_concat(batches(ea)), energon.generic_concat(batches(energon)))
    xs = [torch.ones(2, 3), torch.full((1, 4), 2.0)]
    assert _same(ea.concat_pad(xs), energon.concat_pad(xs))
    assert _same(ea.homogeneous_concat_mix(batches(ea)), energon.homogeneous_concat_mix(batches(energon)))
    with pytest.raises(TypeError, match="one type"):
        ea.homogeneous_concat_mix([{"x": 1}, Pair(torch.ones(1), "r")])


def test_loader_default_batch_matches_energons_default_task_encoder():
    batch = batch_samples(_samples(ea))
    ref = energon.DefaultTaskEncoder().batch(_samples(energon))
    assert isinstance(batch, ea.CaptioningSample)
    assert batch.__restore_key__ == tuple(ref.__restore_key__)  # a tuple: the batch's own restore key
    assert _same(dataclasses.replace(batch, __restore_key__=ref.__restore_key__), ref)
    assert batch.__key__ == ["k0", "k1", "k2"] and batch.caption == ["c0", "c1", "c2"]
    assert batch.__subflavors__ == [None, {"s": 1}, {"s": 2}] and batch.__sources__ == [
        ("src0",),
        None,
        ("src2",),
    ]
    assert batch.image.shape == (3, 3, 2, 4) and float(batch.image[0, 0, 0, 3]) == 0.0
    crude = batch_samples(
        [ea.CrudeSample(__key__="a", x=torch.zeros(2)), ea.CrudeSample(__key__="b", x=torch.ones(2))]
    )
    assert type(crude) is ea.CrudeSample and crude["__key__"] == ["a", "b"] and crude["x"].shape == (2, 2)
