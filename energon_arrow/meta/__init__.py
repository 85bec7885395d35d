"""Readers and writers of energon's `.nv-meta` metadata files, and energon's split arithmetic.

Stable API (other parts import from here):

- constants: `META_DIR`, `INFO_JSON`, `INFO_YAML`, `SPLIT_YAML`, `DATASET_YAML`, `INDEX_SQLITE`, `INDEX_UUID`,
  `SAMPLE_LOADER_PY`, `ENERGON_VERSION`.
- `.info.json`: `DatasetInfo(shard_counts, energon_version)` (`.shards`, `.total_samples`, `.shard_ids()`),
  `parse_info`, `read_info(storage)` (falls back to legacy `.info.yaml`), `info_exists`, `info_json_bytes`.
- `split.yaml`: `SplitConfig(split_parts, exclude)` (`.expanded()`, `.shards(part)`, `.excluded_shards()`,
  `.excluded_samples()`), `parse_split`, `read_split(storage, name)`, `split_yaml_bytes`; split arithmetic:
  `parse_split_ratio`, `ratio_split(shards, ratios, shuffle_seed)`, `parse_split_parts`, `pattern_split`,
  `unmatched_parts`; brace expressions (the braceexpand package, as energon): `expand_braces`, `collapse_names`.
- `dataset.yaml`: `DatasetYaml`, `parse_dataset_yaml`, `read_dataset_yaml`, `dataset_yaml_bytes`,
  `field_map_dataset`, `sample_loader_dataset`, `crude_dataset`, `check_sample_type`, `parse_field_map`,
  `field_map_parts`, `check_field_map`, `sample_loader_py`; sample types: `SAMPLE_TYPES`, `CRUDE`.
- `index.uuid`: `new_index_uuid()`, `read_index_uuid(storage)`.
- `.tar.idx`: `tar_index_name(shard)`, `tar_index_bytes(offsets)`, `read_tar_index(storage, shard)`.

Storage-taking functions accept an `energon_arrow.adapters.Storage` rooted at the dataset. Invalid content raises
`MetaError` (a ValueError) naming the file and, for YAML/JSON syntax errors, the line.
"""

from energon_arrow.meta._yaml import parse_yaml
from energon_arrow.meta.braces import collapse_names, expand_braces
from energon_arrow.meta.constants import (
    DATASET_YAML,
    ENERGON_VERSION,
    INDEX_SQLITE,
    INDEX_UUID,
    INFO_JSON,
    INFO_YAML,
    META_DIR,
    SAMPLE_LOADER_PY,
    SPLIT_YAML,
)
from energon_arrow.meta.dataset_yaml import (
    DatasetYaml,
    check_field_map,
    check_sample_type,
    crude_dataset,
    dataset_yaml_bytes,
    field_map_dataset,
    field_map_parts,
    parse_dataset_yaml,
    parse_field_map,
    read_dataset_yaml,
    sample_loader_dataset,
    sample_loader_py,
)
from energon_arrow.meta.errors import MetaError
from energon_arrow.meta.info import DatasetInfo, info_exists, info_json_bytes, parse_info, read_info
from energon_arrow.meta.sample_types import CRUDE, SAMPLE_TYPES
from energon_arrow.meta.split import (
    SplitConfig,
    parse_split,
    parse_split_parts,
    parse_split_ratio,
    pattern_split,
    ratio_split,
    read_split,
    split_yaml_bytes,
    unmatched_parts,
)
from energon_arrow.meta.tar_index import read_tar_index, tar_index_bytes, tar_index_name
from energon_arrow.meta.uuid_file import new_index_uuid, read_index_uuid

__all__ = [
    "CRUDE",
    "DATASET_YAML",
    "ENERGON_VERSION",
    "INDEX_SQLITE",
    "INDEX_UUID",
    "INFO_JSON",
    "INFO_YAML",
    "META_DIR",
    "SAMPLE_LOADER_PY",
    "SAMPLE_TYPES",
    "SPLIT_YAML",
    "DatasetInfo",
    "DatasetYaml",
    "MetaError",
    "parse_yaml",
    "SplitConfig",
    "check_field_map",
    "check_sample_type",
    "collapse_names",
    "crude_dataset",
    "dataset_yaml_bytes",
    "expand_braces",
    "field_map_dataset",
    "field_map_parts",
    "info_exists",
    "info_json_bytes",
    "new_index_uuid",
    "parse_dataset_yaml",
    "parse_field_map",
    "parse_info",
    "parse_split",
    "parse_split_parts",
    "parse_split_ratio",
    "pattern_split",
    "ratio_split",
    "read_dataset_yaml",
    "read_index_uuid",
    "read_info",
    "read_split",
    "read_tar_index",
    "sample_loader_dataset",
    "sample_loader_py",
    "split_yaml_bytes",
    "tar_index_bytes",
    "tar_index_name",
    "unmatched_parts",
]
