"""The fixtures of tests/loader (prepared datasets), shared."""

from tests.loader.conftest import dataset_copy, energon_prepared_root, prepared_root  # noqa: F401
