"""Part decoding by extension with energon's rules: `PartDecoder` (the loader's decoder) and `SampleDecoder`
(energon's class and constructor; a PartDecoder, so `task_encoder.decoder = SampleDecoder(...)` works).

Order of the rules for a part named e.g. `seg.txt` (extension = text after the last dot):
1. `.gz`: the payload is gunzipped and decoded by the rest of the name (`txt.gz` -> as `txt`);
2. `handlers` given to PartDecoder, by lower-cased extension (our extension point);
3. images (jpg, png, webp, ... any case) -> `image_decode` (see images/decode.py);
4. video / audio (mp4, avi, mov, webm, mkv, flac, mp3, wav, flv) -> `av_decode` (samples/av; needs PyAV, the
   `av` extra): an AVDecoder, a PyAV container, or decoded AVData ("torch": types energon does not decode whole
   fall through to rule 5);
5. txt/text/transcript, cls/cls2/index/inx/id, json/jsn, npy, npz, pkl/pickle/pyd, pth, ten/tb, mp/msg, cbor
   (case-sensitive, as in energon) -> see samples/payloads.py;
6. anything else stays bytes.
With `guess_content=True` rules 3 and 4 look at the payload's detected type (the `filetype` package) instead of
the name. `raw=True` (energon's `decoder = None`) keeps every part as bytes.
"""

from __future__ import annotations

import functools
import gzip
import re
from collections.abc import Callable
from typing import Any

from energon_arrow.images import jpeg_bytes
from energon_arrow.images.decode import IMAGE_EXTENSIONS, ImageSpec, check_image_mode, decode_image
from energon_arrow.images.decode_into import ImageOptions, image_options
from energon_arrow.samples.av.decoder import AV_MODES, AVWebdatasetDecoder, is_av_part
from energon_arrow.samples.payloads import BASIC_DECODERS

# energon's split of a member file name into the sample key and the part name
_FILE_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")


def decode_av(data, av_decode: str, video_decode_audio: bool) -> Any:
    """A video / audio payload by `av_decode` (see samples/av): "AVDecoder" -> an AVDecoder (decoded on request),
    "pyav" -> a PyAV input container, "torch" -> the decoded AVData, or None when the payload's detected type is
    not one energon decodes whole (the part then falls through to the basic decoders, as in energon)."""
    return AVWebdatasetDecoder(video_decode_audio, av_decode).decode_payload(data)


def _or_else(fn: Callable, fallback: Callable | None, data) -> Any:
    out = fn(data)
    if out is None:
        return bytes(data) if fallback is None else fallback(data)
    return out


class ImageDecode:
    """The decode function of image parts: `fn(payload, seed=None)`; the loader also decodes whole batches of
    torch-mode images straight into batch memory with its `spec` and `options`."""

    def __init__(self, spec: ImageSpec, options: ImageOptions):
        self.spec, self.options = spec, options

    def __call__(self, data, seed: int | None = None) -> Any:
        return decode_image(data, self.spec, self.options, seed)


def _image_options(spec: ImageSpec, mode: str, size, crop, layout, normalize) -> ImageOptions:
    options = image_options(size, crop, layout, normalize)
    if options.layout != "CHW" and spec.kind != "torch":
        raise ValueError(f"image_layout={layout!r} applies to torch image modes only, not {mode!r}")
    if options.normalize is not None:
        if spec.kind == "pil":
            raise ValueError(f"image_normalize gives tensors / arrays, not PIL images ({mode!r})")
        if any(len(v) not in (1, len(spec.mode)) for v in options.normalize):
            raise ValueError(
                f"image_normalize: mean and std need 1 or {len(spec.mode)} values for {mode!r}, "
                f"got {normalize!r}"
            )
    return options


def _check_device_decode(spec: ImageSpec, mode: str, options: ImageOptions) -> None:
    """image_device_decode=True: torch modes without a target size, and torchvision present."""
    if spec.kind != "torch":
        raise ValueError(f"image_device_decode=True decodes into torch batch tensors, not {mode!r} images")
    if options.size is not None:
        raise ValueError(
            "image_device_decode=True with image_size is not implemented (resizing on the device would give other "
            "pixels than Pillow's); use image_size with the workers' decoding"
        )
    jpeg_bytes.batched_jpeg_decoder()


def _gunzip_then(inner: Callable | None, data) -> Any:
    plain = gzip.decompress(bytes(data))
    return plain if inner is None else inner(plain)


def _as_bytes(data) -> bytes:
    return bytes(data)


class PartDecoder:
    """Decodes one part payload by its name (see the module docstring for the rules).

    `raw`: keep every part as bytes. `image_decode`: one of energon's image modes (default "torchrgb": float32
    CHW RGB in [0, 1]). `handlers`: {extension: fn(payload) -> value}, tried before the built-in rules.
    `av_decode`, `video_decode_audio`, `guess_content`: as energon's SampleDecoder.
    Our image extras (see docs/loader.md): `image_size` (int or (h, w)) with `image_crop` ("center" or "random"),
    `image_layout` ("CHW" or "HWC", torch modes) and `image_normalize` ((mean, std): float output);
    `image_device_decode`: a `Loader`'s workers ship the compressed images and the training process decodes them
    in batches on its device (torchvision, nvjpeg on CUDA; images/gpu_decode.py).
    """

    def __init__(
        self,
        raw: bool = False,
        image_decode: str = "torchrgb",
        handlers: dict[str, Callable[[Any], Any]] | None = None,
        *,
        av_decode: str = "AVDecoder",
        video_decode_audio: bool = False,
        guess_content: bool = False,
        image_size: int | tuple[int, int] | None = None,
        image_crop: str = "center",
        image_layout: str = "CHW",
        image_normalize: tuple | None = None,
        image_device_decode: bool = False,
    ):
        self.image_spec = check_image_mode(image_decode)
        self.image_options = _image_options(
            self.image_spec, image_decode, image_size, image_crop, image_layout, image_normalize
        )
        if image_device_decode:
            _check_device_decode(self.image_spec, image_decode, self.image_options)
        self.image_device_decode = bool(image_device_decode)
        if av_decode not in AV_MODES:
            raise ValueError(f"av_decode must be one of {AV_MODES}, got {av_decode!r}")
        if guess_content:
            try:
                import filetype  # noqa: F401
            except ImportError:
                raise ImportError(
                    "guess_content=True needs the filetype package (pip install filetype)"
                ) from None
        self.raw = raw
        self.image_decode = image_decode
        self.handlers = {k.lower(): fn for k, fn in (handlers or {}).items()}
        self.av_decode = av_decode
        self.video_decode_audio = video_decode_audio
        self.guess_content = guess_content

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.config().items())})"

    def config(self) -> dict:
        """The decoding settings (energon's keys, plus `raw` / `handlers` when set)."""
        cfg = dict(
            image_decode=self.image_decode,
            av_decode=self.av_decode,
            video_decode_audio=self.video_decode_audio,
            guess_content=self.guess_content,
        )
        if self.raw:
            cfg["raw"] = True
        if self.handlers:
            cfg["handlers"] = sorted(self.handlers)
        opts = self.image_options
        if not opts.is_default:
            cfg.update(image_size=opts.size, image_crop=opts.crop, image_layout=opts.layout)
            cfg.update(image_normalize=opts.normalize)
        if self.image_device_decode:
            cfg["image_device_decode"] = True
        return cfg

    def _media(self, name: str, basic: Callable | None) -> Callable | None:
        """The image or video / audio decoder for a part name (media parts that torch-mode AV decoding leaves
        undecoded fall through to `basic`)."""
        if name.rsplit(".", 1)[-1].lower() in IMAGE_EXTENSIONS:
            return ImageDecode(self.image_spec, self.image_options)
        if is_av_part(name):
            av = functools.partial(
                decode_av, av_decode=self.av_decode, video_decode_audio=self.video_decode_audio
            )
            return functools.partial(_or_else, av, basic) if self.av_decode == "torch" else av
        return None

    def _guessing(self, part: str, basic: Callable | None, data) -> Any:
        """Images and video / audio by the payload's detected type (by `part` when undetected), else `basic`."""
        import filetype

        kind = filetype.guess(bytes(data[:8192]))
        fn = self._media(kind.extension if kind is not None else part, basic) or basic
        return bytes(data) if fn is None else fn(data)

    def handler(self, part: str) -> Callable | None:
        """The decode function for a part name, or None when the payload stays bytes."""
        if self.raw:
            return None
        if ("." + part).endswith(".gz"):
            return functools.partial(_gunzip_then, self.handler(part[:-3]) or _as_bytes)
        ext = part.rsplit(".", 1)[-1]
        if ext.lower() in self.handlers:
            return self.handlers[ext.lower()]
        basic = BASIC_DECODERS.get(ext)
        if self.guess_content:
            return functools.partial(self._guessing, part, basic)
        return self._media(part, basic) or basic

    def decode_part(self, part: str, data, seed: int | None = None) -> Any:
        """One payload of the part named `part` (e.g. "jpg", "seg.txt") decoded; `seed` draws an image's random
        crop (see ImageDecode)."""
        fn = self.handler(part)
        if fn is None:
            return bytes(data)
        return fn(data, seed) if isinstance(fn, ImageDecode) else fn(data)

    def decode(self, fname: str, raw) -> Any:
        """energon's FileStoreDecoder.decode: the payload of the file `fname` (e.g. "00001.jpg") decoded."""
        m = _FILE_NAME.match(fname)
        return self.decode_part(m.group(2) if m else "", raw)

    def __call__(self, sample: dict) -> dict:
        """A sample dict with every part decoded (energon's decoder call); `__...__` entries are kept (bytes ones
        as text)."""
        from energon_arrow.loader.errors import DecodeError

        out = {}
        for name, value in sample.items():
            if name.startswith("__"):
                out[name] = value.decode("utf-8") if isinstance(value, bytes) else value
                continue
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise TypeError(
                    f"sample {sample.get('__key__')!r}: part {name!r} is not bytes: {type(value)}"
                )
            try:
                out[name] = self.decode_part(name, value)
            except Exception as exc:
                raise DecodeError(
                    str(sample.get("__url__", "sample")), sample.get("__key__"), name, exc
                ) from exc
        return out


class SampleDecoder(PartDecoder):
    """energon's SampleDecoder: the default part decoding with energon's keyword-only options (plus our image
    extras `image_size`, `image_crop`, `image_layout`, `image_normalize`, `image_device_decode`)."""

    def __init__(
        self,
        *,
        image_decode: str = "torchrgb",
        av_decode: str = "AVDecoder",
        video_decode_audio: bool = False,
        guess_content: bool = False,
        image_size: int | tuple[int, int] | None = None,
        image_crop: str = "center",
        image_layout: str = "CHW",
        image_normalize: tuple | None = None,
        image_device_decode: bool = False,
    ):
        super().__init__(
            image_decode=image_decode,
            av_decode=av_decode,
            video_decode_audio=video_decode_audio,
            guess_content=guess_content,
            image_size=image_size,
            image_crop=image_crop,
            image_layout=image_layout,
            image_normalize=image_normalize,
            image_device_decode=image_device_decode,
        )
