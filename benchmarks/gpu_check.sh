#!/usr/bin/env bash
# The CUDA checks a session runs when it is lent a GPU machine (one call, about 4 minutes): the CUDA tests (pinned
# buffers, registered batch slots and the stale-DMA tests, async host-to-device copies, resume on the GPU, nvjpeg
# decode with the real torchvision), the GPU image benchmark (transfer stage for image batches, nvjpeg, the loader
# feeding nvjpeg) and the loader benchmark's 64 MiB host-to-device row; with SUITE=1 also the loader and sample
# suites on a machine where CUDA is present. Logs and results go to $OUT (default /tmp/gpu-check).
# Packages the machine lacks travel as wheels in .whl/ (duckdb, polars, braceexpand, crc32c for Python 3.12;
# `run` with carry [".whl"]):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl duckdb polars==1.0.0 braceexpand crc32c
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
fi
nvidia-smi -L
python3 -c "import torch, torchvision, pyarrow, numpy; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'pyarrow', pyarrow.__version__, 'numpy', numpy.__version__, torch.cuda.get_device_name())"
python3 setup.py build_ext --inplace -q >"$OUT/build.log" 2>&1 || echo "C kernels not built (numpy fallbacks): $OUT/build.log"
echo "== CUDA tests"
timeout "${CUDA_TESTS_S:-150}" python3 -m pytest -q -rs -p no:cacheprovider tests/loader/test_transfer.py \
    tests/images/test_slot_pins.py tests/images/test_image_gpu_decode.py tests/samples/test_sample.py 2>&1 | tee "$OUT/cuda_tests.log" | tail -25
echo "== images_gpu benchmark"
timeout "${BENCH_S:-240}" python3 -m benchmarks.run images_gpu 2>&1 | tee "$OUT/bench.log"
cp benchmarks/results/images_gpu.json "$OUT/" 2>/dev/null
echo "== loader transfer stage on pageable 64 MiB batches vs a plain pinned copy_ (bench_loader's GPU row)"
python3 -c "
from benchmarks.bench_loader import _h2d_gbps
from benchmarks.harness import alternate
ours, ref = alternate(lambda: _h2d_gbps(True), lambda: _h2d_gbps(False), 3)
print('transfer stage GB/s', [round(x, 1) for x in ours], 'plain pinned copy_ GB/s', [round(x, 1) for x in ref])
" 2>&1 | tee "$OUT/loader_h2d.log"
[ "${SUITE:-0}" = 1 ] || exit 0
echo "== loader and sample suites with CUDA present"
timeout "${SUITE_S:-150}" python3 -m pytest -q -rs -p no:cacheprovider -n 8 tests/loader tests/samples \
    -m "not s3 and not conformance and not distributed and not heavy" 2>&1 | tee "$OUT/suite.log" | tail -40
