"""Sample types against energon 7.4.1's: fields, order, defaults, kw-only construction, derive/extend/join."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
import torch

import energon_arrow as ea
from energon_arrow.samples import SAMPLE_TYPES
from energon_arrow.samples.types import required_fields

energon = pytest.importorskip("megatron.energon")

SAMPLE_NAMES = sorted(n for n in SAMPLE_TYPES if n != "CrudeSample")


def _field_spec(cls):
    return [
        (f.name, f.default if f.default is not dataclasses.MISSING else "<required>", f.kw_only)
        for f in dataclasses.fields(cls)
    ]


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_fields_order_defaults_match_energon(name):
    from megatron.energon.flavors.vqa_and_ocr import VQAOCRSample  # not in energon's package exports

    ours = getattr(ea, name)
    ref = VQAOCRSample if name == "VQAOCRSample" else getattr(energon, name)
    assert _field_spec(ours) == _field_spec(ref)
    assert required_fields(ours) == tuple(
        f.name
        for f in dataclasses.fields(ref)
        if f.default is dataclasses.MISSING and not f.name.startswith("__")
    )


def test_every_energon_sample_and_batch_helper_is_exported():
    names = [
        "Sample", "Batch", "CrudeSample", "SampleDecoder", "Cooker", "cooker", "basic_sample_keys", "edataclass",
        "stateless", "SkipSample", "reraise_exception", "log_exception", "generic_batch", "batch_list",
        "batch_stack", "batch_pad_stack", "generic_concat", "concat_pad", "homogeneous_concat_mix", "SourceInfo",
    ]  # fmt: skip
    sample_types = [n for n in energon.__all__ if n.endswith("Sample") and n != "SkipSample"]
    for name in names + sample_types:
        assert name in energon.__all__ and hasattr(ea, name), name


def test_source_info_fields_match_energon():
    assert list(ea.SourceInfo._fields) == [f.name for f in dataclasses.fields(energon.SourceInfo)]
    info = ea.SourceInfo(dataset_path="/d", index=3, shard_name="s.tar", file_names=("k.txt",))
    assert info.shard_name == "s.tar" and hash(info) == hash(ea.SourceInfo("/d", 3, "s.tar", ("k.txt",)))
    with pytest.raises(AttributeError):
        info.index = 4  # immutable, like energon's frozen dataclass


def test_source_info_pickles_as_itself():
    info = ea.SourceInfo("/d", 3, "s.tar", ("k.jpg", "k.txt"))
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps([(info,), (info,)], protocol))
        assert back == [(info,), (info,)] and type(back[0][0]) is ea.SourceInfo
        assert back[0][0].file_names == ("k.jpg", "k.txt")


def test_kw_only_construction_and_extra_attributes():
    with pytest.raises(TypeError):
        ea.TextSample("k", (), None, None, "t")
    with pytest.raises(TypeError, match="__restore_key__"):
        ea.TextSample(__key__="k", text="t")
    s = ea.TextSample(__key__="k", __restore_key__=(), text="t")
    s.extra = 1  # like energon's samples, extra attributes are allowed
    assert s.extra == 1 and s.__subflavors__ is None and s.__sources__ is None


@ea.edataclass
class OursTagged(ea.TextSample):
    tag: str = "none"


@energon.edataclass
class RefTagged(energon.TextSample):
    tag: str = "none"


def _as_dict(sample):
    return {f.name: getattr(sample, f.name) for f in dataclasses.fields(sample)}


def _pair(mod, **kw):
    return mod.CaptioningSample(
        __key__="k1", __restore_key__=("W", "s.tar", 3), __subflavors__={"a": 1}, __sources__=("src1",), **kw
    )


def test_derive_from_matches_energon():
    img = torch.ones(3, 2, 2)
    ours = ea.TextSample.derive_from(_pair(ea, image=img, caption="c"), text="t")
    ref = energon.TextSample.derive_from(_pair(energon, image=img, caption="c"), text="t")
    assert _as_dict(ours) == _as_dict(ref)
    over = ea.TextSample.derive_from(_pair(ea, image=img, caption="c"), text="t", __key__="new")
    assert over.__key__ == "new" and over.__restore_key__ == ("W", "s.tar", 3)


def test_extend_matches_energon():
    ours = OursTagged.extend(ea.TextSample(__key__="k", __restore_key__=(1,), text="t"), tag="x")
    ref = RefTagged.extend(energon.TextSample(__key__="k", __restore_key__=(1,), text="t"), tag="x")
    assert _as_dict(ours) == _as_dict(ref)
    with pytest.raises(TypeError, match="not a base class"):
        ea.TextSample.extend(ea.ImageSample(__key__="k", __restore_key__=(), image=None))


def test_from_joined_matches_energon():
    def joined(mod, tagged):
        a = mod.TextSample(
            __key__="a", __restore_key__=(1,), __subflavors__={"x": 1}, __sources__=("sa",), text="ta"
        )
        b = tagged(__key__="b", __restore_key__=(2,), __sources__=("sb",), text="tb", tag="g")
        return tagged.from_joined(a, None, b)

    ours, ref = joined(ea, OursTagged), joined(energon, RefTagged)
    assert _as_dict(ours) == _as_dict(ref)
    assert ours.__key__ == "a" and ours.text == "tb" and ours.tag == "g"
    with pytest.raises(TypeError, match="positionally"):
        OursTagged.from_joined(primary=ours)
    with pytest.raises(ValueError, match="primary"):
        OursTagged.from_joined(None, ours)


def test_basic_sample_keys_matches_energon():
    crude = ea.CrudeSample(__key__="k", __restore_key__=(1,), __subflavors__={}, __sources__=("s",), txt="x")
    assert ea.basic_sample_keys(crude) == energon.basic_sample_keys(dict(crude))
    assert ea.basic_sample_keys(crude, ("t",)) == energon.basic_sample_keys(dict(crude), ("t",))
    cooked = ea.TextSample(**ea.basic_sample_keys(crude), text=crude["txt"])
    assert cooked.__key__ == "k" and cooked.__sources__ == ("s",)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs CUDA")
def test_pin_memory_keeps_type_and_pins_tensors():
    s = ea.CaptioningSample(__key__="k", __restore_key__=(), image=torch.ones(2), caption="c")
    pinned = s.pin_memory()
    assert type(pinned) is ea.CaptioningSample and pinned.image.is_pinned() and pinned.caption == "c"


def test_resolve_sample_type():
    from energon_arrow.loader.errors import LoaderError
    from energon_arrow.samples.types import resolve_sample_type

    assert resolve_sample_type("CaptioningSample") is ea.CaptioningSample
    assert resolve_sample_type("CrudeWebdataset") is ea.CrudeSample
    with pytest.raises(LoaderError, match="unknown sample type 'Nope'"):
        resolve_sample_type("Nope")
    # energon's fallback: a module that does not exist, naming a built-in type, gives the built-in type
    assert resolve_sample_type("TextSample", "no_such_mod.sub") is ea.TextSample
    with pytest.raises(LoaderError, match=r"ds\.yaml:3: sample_type: cannot import module 'no_such_mod'"):
        resolve_sample_type("MySample", "no_such_mod", "ds.yaml:3: sample_type")
    with pytest.raises(LoaderError, match="module 'json' .* defines no 'MySample'"):
        resolve_sample_type("MySample", "json", "ds.yaml")
    with pytest.raises(LoaderError, match="json.JSONDecoder is not a sample type"):
        resolve_sample_type("JSONDecoder", "json", "ds.yaml")


def test_samples_and_decoders_pickle():
    import pickle

    s = ea.CaptioningSample(__key__="k", __restore_key__=("W", "s", 1), image=torch.ones(2), caption="c")
    back = pickle.loads(pickle.dumps(s))
    assert back.__key__ == "k" and back.__restore_key__ == ("W", "s", 1) and torch.equal(back.image, s.image)
    decoder = pickle.loads(pickle.dumps(ea.SampleDecoder(image_decode="pil", guess_content=True)))
    assert decoder.config() == ea.SampleDecoder(image_decode="pil", guess_content=True).config()
    assert ea.Cooker[ea.TextSample](len).cook("ab") == 2
