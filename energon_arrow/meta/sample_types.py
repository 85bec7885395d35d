"""energon 7.4.1's sample types: the names `--sample-type` accepts and the fields a field_map fills.

Kept as data so the runtime never imports megatron-energon. `SAMPLE_TYPES[name]` is a tuple of
`Field(name, type, required, default)`; `CRUDE = "CrudeWebdataset"` is the crude (cooker) dataset class.
"""

from __future__ import annotations

from typing import NamedTuple


class Field(NamedTuple):
    name: str
    type: str
    required: bool = True
    default: str = ""


def _opt(name: str, tp: str, default: str = "None") -> Field:
    return Field(name, tp, False, default)


CRUDE = "CrudeWebdataset"

SAMPLE_TYPES: dict[str, tuple[Field, ...]] = {
    "CaptioningSample": (Field("image", "torch.Tensor"), Field("caption", "str")),
    "ImageClassificationSample": (
        Field("image", "torch.Tensor"),
        _opt("label", "Optional[int]"),
        _opt("label_name", "Optional[str]"),
    ),
    "ImageSample": (Field("image", "torch.Tensor"),),
    "InterleavedSample": (Field("sequence", "List[Union[torch.Tensor, str]]"),),
    "MultiChoiceVQASample": (
        Field("image", "torch.Tensor"),
        Field("context", "str"),
        _opt("choices", "Optional[List[str]]"),
        _opt("correct_choice_idx", "int", "0"),
    ),
    "OCRSample": (
        Field("image", "torch.Tensor"),
        Field("text", "str"),
        _opt("block_boxes", "Optional[torch.Tensor]"),
        _opt("block_classes", "Union[torch.Tensor, List[str], None]"),
        _opt("block_text", "Optional[List[str]]"),
        _opt("lines_boxes", "Optional[torch.Tensor]"),
        _opt("lines_text", "Optional[List[str]]"),
        _opt("words_boxes", "Optional[torch.Tensor]"),
        _opt("words_text", "Optional[List[str]]"),
        _opt("chars_boxes", "Optional[torch.Tensor]"),
        _opt("chars_text", "Optional[List[str]]"),
    ),
    "Sample": (),
    "SimilarityInterleavedSample": (
        Field("images", "List[torch.Tensor]"),
        Field("texts", "List[str]"),
        _opt("audio", "Optional[List[torch.Tensor]]"),
        _opt("video", "Optional[List[torch.Tensor]]"),
        _opt("similarity_matrix", "Optional[torch.Tensor]"),
        _opt("matched_text_indices", "Optional[List[int]]"),
    ),
    "TextSample": (Field("text", "str"),),
    "VQASample": (
        Field("image", "torch.Tensor"),
        Field("context", "str"),
        _opt("answers", "Optional[List[str]]"),
        _opt("answer_weights", "Optional[torch.Tensor]"),
    ),
    "VidQASample": (
        Field("video", "megatron.energon.av.AVDecoder"),
        Field("context", "str"),
        _opt("answers", "Optional[List[str]]"),
        _opt("answer_weights", "Optional[torch.Tensor]"),
    ),
}

ALL_TYPE_NAMES: tuple[str, ...] = (*SAMPLE_TYPES, CRUDE)
