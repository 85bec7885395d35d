"""energon-arrow: prepare and load WebDataset shards and Megatron token datasets with an Arrow core."""

__version__ = "0.1.0"
