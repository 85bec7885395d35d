"""Token datasets: Megatron-compatible .bin/.idx files (reader, writer, merge, preprocess)."""
