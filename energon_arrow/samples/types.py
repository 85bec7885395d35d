"""Sample dataclasses with energon 7.4.1's names and fields, and energon-shaped batching.

A batch is an instance of the same sample class whose fields hold lists (one entry per sample), except tensor
fields, which are zero-padded and stacked (energon's default batching). `__key__` becomes a list of keys.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from energon_arrow.loader.errors import LoaderError


@dataclass
class Sample:
    """Base of every sample type: the key, the restore key (source of the sample) and optional subflavors."""

    __key__: str
    __restore_key__: tuple = ()
    __subflavors__: dict | None = None
    __sources__: tuple | None = None


@dataclass
class CaptioningSample(Sample):
    image: Any = None
    caption: Any = None


@dataclass
class ImageSample(Sample):
    image: Any = None


@dataclass
class ImageClassificationSample(Sample):
    image: Any = None
    label: int | None = None
    label_name: str | None = None


@dataclass
class InterleavedSample(Sample):
    sequence: list = field(default_factory=list)


@dataclass
class MultiChoiceVQASample(Sample):
    image: Any = None
    context: Any = None
    choices: list | None = None
    correct_choice_idx: int = 0


@dataclass
class OCRSample(Sample):
    image: Any = None
    text: Any = None
    block_boxes: Any = None
    block_classes: Any = None
    block_text: list | None = None
    lines_boxes: Any = None
    lines_text: list | None = None
    words_boxes: Any = None
    words_text: list | None = None
    chars_boxes: Any = None
    chars_text: list | None = None


@dataclass
class SimilarityInterleavedSample(Sample):
    images: list = field(default_factory=list)
    texts: list = field(default_factory=list)
    audio: list | None = None
    video: list | None = None
    similarity_matrix: Any = None
    matched_text_indices: list | None = None


@dataclass
class TextSample(Sample):
    text: Any = None


@dataclass
class VidQASample(Sample):
    video: Any = None
    context: Any = None
    answers: list | None = None
    answer_weights: Any = None


@dataclass
class VQASample(Sample):
    image: Any = None
    context: Any = None
    answers: list | None = None
    answer_weights: Any = None


@dataclass
class VQAOCRSample(Sample):
    image: Any = None
    context: Any = None
    text: Any = None
    answers: list | None = None
    answer_weights: Any = None
    words_boxes: Any = None
    words_text: list | None = None


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

META_FIELDS = ("__key__", "__restore_key__", "__subflavors__", "__sources__")


def resolve_sample_type(name: str, module: str = "megatron.energon", where: str = "dataset.yaml") -> type:
    """The sample class for a dataset.yaml `sample_type` (`__module__` + `__class__`)."""
    if module not in _KNOWN_MODULES and not str(module).startswith("megatron.energon."):
        raise LoaderError(
            f"{where}: unknown sample type {module}.{name}; known: megatron.energon's {sorted(SAMPLE_TYPES)}"
        )
    if name == "CrudeWebdataset":
        return CrudeSample
    if name not in SAMPLE_TYPES:
        raise LoaderError(f"{where}: unknown sample type {name!r}; known: {sorted(SAMPLE_TYPES)}")
    return SAMPLE_TYPES[name]


def sample_fields(cls: type) -> list[str]:
    """The payload fields of a sample class (everything except the dunder metadata fields)."""
    return [f.name for f in dataclasses.fields(cls) if f.name not in META_FIELDS]


def required_fields(cls: type) -> tuple[str, ...]:
    """Fields energon declares without a default: a field map must provide them."""
    from energon_arrow.meta.sample_types import SAMPLE_TYPES as FIELDS

    return tuple(f.name for f in FIELDS.get(cls.__name__, ()) if f.required)


def pad_stack(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Zero-pad tensors to the largest size along each dimension and stack them (energon's batch_pad_stack)."""
    first = tensors[0]
    if all(t.shape == first.shape for t in tensors):
        return torch.stack(tensors)
    sizes = [max(t.shape[d] for t in tensors) for d in range(first.ndim)]
    out = first.new_zeros((len(tensors), *sizes))
    for i, t in enumerate(tensors):
        out[(i, *(slice(0, s) for s in t.shape))] = t
    return out


def batch_values(values: list) -> Any:
    """One batched field: tensors are padded and stacked, dicts recurse, everything else becomes a list."""
    if values and isinstance(values[0], torch.Tensor):
        return pad_stack(values)
    if values and type(values[0]) is dict:
        return {k: batch_values([v[k] for v in values]) for k in values[0]}
    return values


def batch_samples(samples: list) -> Any:
    """energon's default batch of a list of samples (dataclasses, crude dicts or plain values)."""
    first = samples[0]
    if isinstance(first, dict):
        return type(first)({k: batch_values([s[k] for s in samples]) for k in first})
    if dataclasses.is_dataclass(first):
        kwargs = {}
        for f in dataclasses.fields(first):
            values = [getattr(s, f.name) for s in samples]
            if f.name == "__subflavors__":
                kwargs[f.name] = values if any(v is not None for v in values) else None
            elif f.name == "__sources__":
                kwargs[f.name] = tuple(x for v in values if v for x in v) if any(values) else None
            else:
                kwargs[f.name] = batch_values(values)
        return type(first)(**kwargs)
    return batch_values(samples)
