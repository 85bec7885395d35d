"""`energon_arrow.energon.a.b` mirrors `megatron.energon.a.b`: each module re-exports, under energon's module path,
the names energon_arrow implements (`from megatron.energon.a.b import X` -> `from energon_arrow.energon.a.b import X`;
top-level names: `from energon_arrow import X`). No logic lives here."""
