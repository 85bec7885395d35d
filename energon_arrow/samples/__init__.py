"""energon-compatible sample types, batching, field maps, part decoders, cookers and task-encoder helpers."""

from energon_arrow.samples.batch import (
    Batch,
    batch_list,
    batch_pad_stack,
    batch_samples,
    batch_stack,
    concat_pad,
    generic_batch,
    generic_concat,
    homogeneous_concat_mix,
)
from energon_arrow.samples.cookers import Cooker, basic_sample_keys, cooker
from energon_arrow.samples.decoders import PartDecoder, SampleDecoder
from energon_arrow.samples.errors import SkipSample, log_exception, reraise_exception
from energon_arrow.samples.fieldmap import FieldMap
from energon_arrow.samples.sample import Sample, SourceInfo, edataclass
from energon_arrow.samples.stateless import get_failure_tolerance, get_stateless, stateless
from energon_arrow.samples.types import (
    SAMPLE_TYPES,
    CaptioningSample,
    CrudeSample,
    ImageClassificationSample,
    ImageSample,
    InterleavedSample,
    MultiChoiceVQASample,
    OCRSample,
    SimilarityInterleavedSample,
    TextSample,
    VidQASample,
    VQAOCRSample,
    VQASample,
    resolve_sample_type,
)

__all__ = [
    "SAMPLE_TYPES",
    "Batch",
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
    "SampleDecoder",
    "SimilarityInterleavedSample",
    "SkipSample",
    "SourceInfo",
    "TextSample",
    "VQAOCRSample",
    "VQASample",
    "VidQASample",
    "basic_sample_keys",
    "batch_list",
    "batch_pad_stack",
    "batch_samples",
    "batch_stack",
    "concat_pad",
    "cooker",
    "edataclass",
    "generic_batch",
    "generic_concat",
    "get_failure_tolerance",
    "get_stateless",
    "homogeneous_concat_mix",
    "log_exception",
    "reraise_exception",
    "resolve_sample_type",
    "stateless",
]
