"""Build hook for the optional C extension of the token datasets, energon_arrow.tokens._kernels (sources in
energon_arrow/tokens/kernels/, one file per kernel): a numpy-identical shuffle with prefetching, the GPT sample
boundaries in one pass, a GPT sample gather and Megatron's blending walk. Without a C compiler the install still
succeeds and the numpy paths are used: same results, slower index builds and batches."""

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
        )
    ]
)
