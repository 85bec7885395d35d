"""Sample types and energon-shaped batching."""

from __future__ import annotations

import pytest
import torch

from energon_arrow.loader.errors import LoaderError
from energon_arrow.samples.types import (
    CaptioningSample,
    CrudeSample,
    TextSample,
    batch_samples,
    resolve_sample_type,
)


def test_resolve():
    assert resolve_sample_type("CaptioningSample") is CaptioningSample
    assert resolve_sample_type("CrudeWebdataset") is CrudeSample
    with pytest.raises(LoaderError, match="unknown sample type 'Nope'"):
        resolve_sample_type("Nope")
    with pytest.raises(LoaderError, match="unknown sample type my.mod.TextSample"):
        resolve_sample_type("TextSample", "my.mod")


def test_batch_pads_and_stacks_tensors_and_lists_the_rest():
    a = CaptioningSample(__key__="a", __restore_key__=("W", "s", 0), image=torch.ones(2, 3), caption="x")
    b = CaptioningSample(__key__="b", __restore_key__=("W", "s", 1), image=torch.ones(3, 2), caption="y")
    batch = batch_samples([a, b])
    assert isinstance(batch, CaptioningSample)
    assert batch.__key__ == ["a", "b"] and batch.caption == ["x", "y"]
    assert batch.image.shape == (2, 3, 3) and float(batch.image[0, 2, 0]) == 0.0
    assert batch.__subflavors__ is None


def test_batch_of_dicts():
    batch = batch_samples([TextSample(__key__="k", text="t")])
    assert batch.text == ["t"]
    assert batch_samples([{"x": torch.zeros(2)}, {"x": torch.zeros(2)}])["x"].shape == (2, 2)
