"""Build hook for the optional C extensions (without a C compiler the install still succeeds and the pure-Python
paths are used: same results, slower):

- energon_arrow.tokens._kernels (sources in energon_arrow/tokens/kernels/, one file per kernel): a numpy-identical
  shuffle with prefetching, the GPT sample boundaries in one pass, a GPT sample gather and Megatron's blending walk;
- energon_arrow.index._sqlite_pages (energon_arrow/index/kernels/): index.sqlite's b-trees written page by page
  (prepare falls back to SQLite inserts without it);
- energon_arrow.tar._headers (energon_arrow/tar/kernels/): the header walk of plain tar shards in one pass
  (the vectorised numpy walk without it);
- energon_arrow.tar._crc32c (energon_arrow/tar/kernels/crc32c.c): the CRC32C of every part of a shard in one call
  with the GIL released (one crc32c package call per part without it)."""

import glob

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "energon_arrow.tokens._kernels",
            sorted(glob.glob("energon_arrow/tokens/kernels/*.c")),
            depends=["energon_arrow/tokens/kernels/kernels.h"],
            extra_compile_args=["-O3", "-ffp-contract=off"],  # no fused multiply-add: Megatron's rounding
            optional=True,
        ),
        Extension(
            "energon_arrow.tar._headers",
            ["energon_arrow/tar/kernels/headers.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "energon_arrow.tar._crc32c",
            ["energon_arrow/tar/kernels/crc32c.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "energon_arrow.index._sqlite_pages",
            ["energon_arrow/index/kernels/sqlite_pages.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
