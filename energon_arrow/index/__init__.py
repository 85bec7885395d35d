"""Dataset indexes: `prepare` (tar shards -> energon's `.nv-meta` + Parquet side indexes), the side-index schemas
and readers. See `energon_arrow.index.prepare.prepare_dataset` and docs/prepare.md, docs/format.md."""
