"""energon-compatible sample types, field maps, part decoders and cookers."""

from energon_arrow.samples.cookers import Cooker, stateless
from energon_arrow.samples.decoders import PartDecoder
from energon_arrow.samples.fieldmap import FieldMap
from energon_arrow.samples.types import (
    SAMPLE_TYPES,
    CaptioningSample,
    CrudeSample,
    ImageClassificationSample,
    ImageSample,
    InterleavedSample,
    MultiChoiceVQASample,
    OCRSample,
    Sample,
    SimilarityInterleavedSample,
    TextSample,
    VidQASample,
    VQAOCRSample,
    VQASample,
    batch_samples,
    resolve_sample_type,
)

__all__ = [
    "SAMPLE_TYPES",
    "CaptioningSample",
    "Cooker",
    "CrudeSample",
    "FieldMap",
    "ImageClassificationSample",
    "ImageSample",
    "InterleavedSample",
    "MultiChoiceVQASample",
    "OCRSample",
    "PartDecoder",
    "Sample",
    "SimilarityInterleavedSample",
    "TextSample",
    "VQAOCRSample",
    "VQASample",
    "VidQASample",
    "batch_samples",
    "resolve_sample_type",
    "stateless",
]
