"""Mirrors `megatron.energon.flavors.webdataset.config`: energon's file-name constants, under energon's names, from
energon_arrow.meta.constants."""

from energon_arrow.meta import constants

MAIN_FOLDER_NAME = constants.META_DIR
INDEX_SQLITE_FILENAME = constants.INDEX_SQLITE
INDEX_UUID_FILENAME = constants.INDEX_UUID
INFO_JSON_FILENAME = constants.INFO_JSON
INFO_YAML_FILENAME = constants.INFO_YAML
SPLIT_YAML_FILENAME = constants.SPLIT_YAML

__all__ = [
    "INDEX_SQLITE_FILENAME",
    "INDEX_UUID_FILENAME",
    "INFO_JSON_FILENAME",
    "INFO_YAML_FILENAME",
    "MAIN_FOLDER_NAME",
    "SPLIT_YAML_FILENAME",
]
