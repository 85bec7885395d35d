"""energon 7.4.1's sample types: names, fields, field order and defaults as energon declares them."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from energon_arrow.loader.errors import LoaderError
from energon_arrow.samples.sample import META_FIELDS, Sample, edataclass


@edataclass
class CaptioningSample(Sample):
    """An image and its caption."""

    image: torch.Tensor
    caption: str


@edataclass
class ImageSample(Sample):
    """An image, e.g. for reconstruction."""

    image: torch.Tensor


@edataclass
class ImageClassificationSample(Sample):
    """An image with its class index and/or class name."""

    image: torch.Tensor
    label: int | None = None
    label_name: str | None = None


@edataclass
class InterleavedSample(Sample):
    """A sequence of interleaved media and text."""

    sequence: list[torch.Tensor | str]


@edataclass
class MultiChoiceVQASample(Sample):
    """A question about an image with answer choices and the index of the correct one."""

    image: torch.Tensor
    context: str
    choices: list[str] | None = None
    correct_choice_idx: int = 0


@edataclass
class OCRSample(Sample):
    """An image with its text and optional block / line / word / character boxes and texts."""

    image: torch.Tensor
    text: str
    block_boxes: torch.Tensor | None = None
    block_classes: torch.Tensor | list[str] | None = None
    block_text: list[str] | None = None
    lines_boxes: torch.Tensor | None = None
    lines_text: list[str] | None = None
    words_boxes: torch.Tensor | None = None
    words_text: list[str] | None = None
    chars_boxes: torch.Tensor | None = None
    chars_text: list[str] | None = None


@edataclass
class SimilarityInterleavedSample(Sample):
    """Images and texts without alignment; the similarity matrix assigns them."""

    images: list[torch.Tensor]
    texts: list[str]
    audio: list[torch.Tensor] | None = None
    video: list[torch.Tensor] | None = None
    similarity_matrix: torch.Tensor | None = None
    matched_text_indices: list[int] | None = None


@edataclass
class TextSample(Sample):
    """A text."""

    text: str


@edataclass
class VidQASample(Sample):
    """A question about a video (the decoded video part) with optional answers."""

    video: Any
    context: str
    answers: list[str] | None = None
    answer_weights: torch.Tensor | None = None


@edataclass
class VQASample(Sample):
    """A question about an image with optional answers."""

    image: torch.Tensor
    context: str
    answers: list[str] | None = None
    answer_weights: torch.Tensor | None = None


@edataclass
class VQAOCRSample(Sample):
    """A question about an image with its text and optional answers and word boxes."""

    image: torch.Tensor
    context: str
    text: str
    answers: list[str] | None = None
    answer_weights: torch.Tensor | None = None
    words_boxes: torch.Tensor | None = None
    words_text: list[str] | None = None


class CrudeSample(dict):
    """A raw sample: a dict of part name -> payload plus `__key__`, `__restore_key__`, `__subflavors__`."""


SAMPLE_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        Sample,
        CaptioningSample,
        ImageSample,
        ImageClassificationSample,
        InterleavedSample,
        MultiChoiceVQASample,
        OCRSample,
        SimilarityInterleavedSample,
        TextSample,
        VidQASample,
        VQASample,
        VQAOCRSample,
        CrudeSample,
    )
}

# Modules a dataset.yaml may name for the built-in types: energon's and ours.
_KNOWN_MODULES = ("megatron.energon", "energon_arrow", "energon_arrow.samples")


def resolve_sample_type(name: str, module: str = "megatron.energon", where: str = "dataset.yaml") -> type:
    """The sample class for a dataset.yaml `sample_type` (`__module__` + `__class__`): energon's built-in types
    by name, or a user's own `Sample` dataclass imported from its module (samples/user_classes.py; as in energon,
    a module that is not found falls back to the built-in type of that name)."""
    if name == "CrudeWebdataset":
        return CrudeSample
    if module in _KNOWN_MODULES or str(module).startswith("megatron.energon."):
        if name not in SAMPLE_TYPES:
            raise LoaderError(f"{where}: unknown sample type {name!r}; known: {sorted(SAMPLE_TYPES)}")
        return SAMPLE_TYPES[name]
    from energon_arrow.samples.user_classes import import_named, module_exists

    try:
        cls = import_named(module, name, where)
    except LoaderError:
        if name in SAMPLE_TYPES and not module_exists(module):
            return SAMPLE_TYPES[name]  # energon's fallback for a module that does not exist
        raise
    if not (isinstance(cls, type) and issubclass(cls, Sample) and dataclasses.is_dataclass(cls)):
        raise LoaderError(
            f"{where}: {module}.{name} is not a sample type (a dataclass subclass of energon's Sample), got {cls!r}"
        )
    return cls


def sample_fields(cls: type) -> list[str]:
    """The payload fields of a sample class (everything except the dunder metadata fields)."""
    return [f.name for f in dataclasses.fields(cls) if f.name not in META_FIELDS]


def required_fields(cls: type) -> tuple[str, ...]:
    """Payload fields declared without a default: a field map must provide them."""
    missing = dataclasses.MISSING
    return tuple(
        f.name
        for f in dataclasses.fields(cls)
        if f.name not in META_FIELDS and f.default is missing and f.default_factory is missing
    )
