"""Build hook for the optional C extensions of the token datasets (energon_arrow/tokens/): a numpy-identical
shuffle with prefetching (_legacy_shuffle.c), the GPT sample boundaries in one pass (_sample_boundaries.c) and a
GPT sample gather (_sample_gather.c) and Megatron's blending walk (_blend.c). Without a C compiler the install still succeeds and the numpy paths are used:
same results, slower index builds and batches."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            f"energon_arrow.tokens.{name}",
            [f"energon_arrow/tokens/{name}.c"],
            extra_compile_args=["-O3", "-ffp-contract=off"],  # no fused multiply-add: Megatron's rounding
            optional=True,
        )
        for name in ("_blend", "_legacy_shuffle", "_sample_boundaries", "_sample_gather")
    ]
)
