"""The error type of `energon_arrow.meta`: a bad metadata file, named with its location."""

from __future__ import annotations


class MetaError(ValueError):
    """A metadata file (.info.json, split.yaml, dataset.yaml, ...) or argument is invalid.

    The message names the file (or option) and, where known, the line.
    """
