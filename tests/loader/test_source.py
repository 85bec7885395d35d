"""The effective split table as the loader holds it: memory-mapped index arrays and the part layout."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc

from energon_arrow.loader.source import open_split
from energon_arrow.query import open_dataset


def test_split_is_memory_mapped_and_matches_the_query_layer(prepared_root):
    src = open_split(prepared_root, "train")
    with open_dataset(prepared_root) as ds:
        table = ds.split("train")
        parts = ds.split_parts("train")
    # the columns read the dataset's memory-mapped row index through the split's row runs
    assert isinstance(src.byte_offset.table, np.memmap) and isinstance(src.parts["jpg"][0].table, np.memmap)
    assert src.keys.to_pylist() == table["sample_key"].to_pylist()
    assert np.array_equal(src.byte_offset, table["byte_offset"].to_numpy())
    jpg = parts.filter(pc.equal(parts["part_name"], "jpg"))
    rel = jpg["content_offset"].to_numpy() - table["byte_offset"].to_numpy()
    assert np.array_equal(src.parts["jpg"][0], rel)
    assert np.array_equal(src.parts["jpg"][1], jpg["content_size"].to_numpy())
    src.release_pages()  # dropping the mappings' pages keeps the data readable
    assert (
        src.keys[5].as_py() == table["sample_key"][5].as_py()
        and int(src.byte_size[7]) == table["byte_size"][7].as_py()
    )
    sub = src.subset(10, 20)
    assert sub.keys.to_pylist() == table["sample_key"].to_pylist()[10:20] and len(sub) == 10
