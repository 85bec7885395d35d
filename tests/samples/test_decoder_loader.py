"""SampleDecoder as a task encoder's decoder in the loader: decoded images equal energon's decoder output."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest
import torch

import energon_arrow as ea
from tests.loader.conftest import first_batch

energon = pytest.importorskip("megatron.energon")
Image = pytest.importorskip("PIL.Image")


@pytest.fixture(scope="module")
def png_root(tmp_path_factory) -> tuple[str, dict[str, bytes]]:
    """One shard of 8 samples with real PNG images (varying sizes) and captions, prepared as CaptioningSample."""
    from energon_arrow.index.prepare import PrepareOptions, prepare_dataset
    from energon_arrow.meta import field_map_dataset, parse_split_ratio

    root = tmp_path_factory.mktemp("png") / "ds"
    (root / "shards").mkdir(parents=True)
    rng = np.random.default_rng(3)
    images = {}
    with tarfile.open(root / "shards" / "shard-000000.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(8):
            key = f"s{i:03d}"
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (4 + i, 5, 4), dtype=np.uint8), "RGBA").save(
                buf, format="PNG"
            )
            images[key] = buf.getvalue()
            for ext, payload in (("png", images[key]), ("txt", f"caption {i}".encode())):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    options = PrepareOptions(
        split_ratio=parse_split_ratio("1,0,0"),
        dataset_yaml=field_map_dataset("CaptioningSample", {"image": "png", "caption": "txt"}),
        num_workers=1,
    )
    prepare_dataset(str(root), options)
    return str(root), images


class Encoding(ea.DefaultTaskEncoder):
    """A custom encode_sample: the loader builds samples one by one (not column-wise)."""

    @ea.stateless
    def encode_sample(self, sample):
        return sample


@pytest.mark.parametrize("te_cls", [ea.DefaultTaskEncoder, Encoding], ids=["columnar", "per-sample"])
@pytest.mark.parametrize("mode", ["pil", "torchrgb", "rgba8", "torchl8"])
def test_loader_decodes_like_energon(png_root, te_cls, mode):
    root, images = png_root
    te = te_cls()
    te.decoder = ea.SampleDecoder(image_decode=mode)
    batch = first_batch(root, te, shuffle_buffer_size=None, max_samples_per_sequence=None)
    ref = energon.SampleDecoder(image_decode=mode)
    assert len(batch.__key__) == 4
    for i, key in enumerate(batch.__key__):
        want = ref.decode(f"{key}.png", images[key])
        if mode == "pil":
            got = batch.image[i]
            assert got.mode == want.mode and got.size == want.size and got.tobytes() == want.tobytes()
        elif isinstance(want, torch.Tensor):  # tensors are zero-padded and stacked
            got = batch.image[i][tuple(slice(0, s) for s in want.shape)]
            assert got.dtype == want.dtype and torch.equal(got, want)
        else:  # numpy arrays are listed
            got = batch.image[i]
            assert got.dtype == want.dtype and np.array_equal(got, want)


def test_file_store_decodes_parts_and_whole_samples(png_root):
    from energon_arrow.loader.filestore import open_file_store

    root, images = png_root
    store = open_file_store(root, decoder=ea.SampleDecoder(image_decode="pil"))
    caption, source = store["s003.txt"]
    assert caption == "caption 3" and source.file_names == ("s003.txt",)
    whole, _ = store["s003"]
    want = energon.SampleDecoder(image_decode="pil").decode("s003.png", images["s003"])
    assert whole["txt"] == "caption 3" and whole["png"].tobytes() == want.tobytes()
