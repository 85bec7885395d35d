"""File names inside a prepared dataset (energon 7.4.1's layout)."""

META_DIR = ".nv-meta"
INFO_JSON = ".info.json"
INFO_YAML = ".info.yaml"  # legacy, read when .info.json is missing
SPLIT_YAML = "split.yaml"
DATASET_YAML = "dataset.yaml"
INDEX_SQLITE = "index.sqlite"
INDEX_UUID = "index.uuid"
SAMPLE_LOADER_PY = "sample_loader.py"
ENERGON_VERSION = "7.4.1"  # written into .info.json so energon treats the dataset as its own
