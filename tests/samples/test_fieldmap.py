"""Field maps: `json[key][0]` access and `a,b` alternatives."""

from __future__ import annotations

import pytest

from energon_arrow.loader.errors import LoaderError, MissingPartError
from energon_arrow.samples.fieldmap import FieldMap, PartRef
from energon_arrow.samples.types import CaptioningSample, required_fields, sample_fields


def test_parse_access_paths():
    assert PartRef.parse("json[a][0][b]", "x") == PartRef("json", ("a", 0, "b"))
    assert PartRef.parse("txt", "x") == PartRef("txt")
    with pytest.raises(LoaderError, match="malformed field map access"):
        PartRef.parse("json[a", "x")


def test_alternatives_and_resolution():
    fm = FieldMap({"image": "png,jpg", "caption": "json[c][1]"})
    assert fm.parts == {"png", "jpg", "json"}
    chosen = fm.choose({"jpg": b"", "json": b""}, "s.tar", "k")
    assert chosen["image"].part == "jpg"
    assert chosen["caption"].resolve({"c": ["x", "y"]}, "s.tar", "k") == "y"
    with pytest.raises(MissingPartError, match=r"s.tar: sample 'k': part 'json' has no element 'c'"):
        chosen["caption"].resolve({}, "s.tar", "k")
    with pytest.raises(MissingPartError, match="field 'image' maps to part 'png,jpg'"):
        fm.choose({"json": b""}, "s.tar", "k")


def test_field_checks():
    fm = FieldMap({"image": "jpg"})
    with pytest.raises(LoaderError, match=r"lacks required CaptioningSample fields \['caption'\]"):
        fm.check_fields(CaptioningSample, sample_fields(CaptioningSample), required_fields(CaptioningSample))
    with pytest.raises(LoaderError, match="non-empty mapping"):
        FieldMap({})
