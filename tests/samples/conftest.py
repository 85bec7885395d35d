"""The loader's prepared-dataset fixtures, for the tests that run samples through the loader."""

from tests.loader.conftest import dataset_copy, prepared_root  # noqa: F401
