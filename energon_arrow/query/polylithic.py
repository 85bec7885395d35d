"""Polylithic datasets: resolve a primary dataset's media references against auxiliary sources in one query.

An auxiliary source is a prepared WebDataset (a reference `<sample key>.<part>` names one part, as energon's
`WebdatasetFileStore` reads it; a bare sample key names the whole sample) or a plain folder (a reference is a path
relative to it), local or on S3. `resolve_references` returns where every reference lives (source, file inside it,
byte offset, byte size) and which ones dangle, before any training step reads a byte.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from energon_arrow.adapters import Storage
from energon_arrow.query.catalog import DUCKDB_CONFIG
from energon_arrow.query.errors import DanglingReferenceError

if TYPE_CHECKING:
    from energon_arrow.query.dataset import Dataset

# energon's member-name rule: key = directory prefix + basename up to the first dot; part = the rest
ENTRY_RE = r"^((?:.*/|)[^.]+)[.]([^/]*)$"
FOLDER_SCHEMA = pa.schema([("path", pa.string()), ("size", pa.int64())])


@dataclass
class AuxSource:
    name: str
    url: str
    dataset: Dataset | None  # prepared WebDataset
    files: pa.Table | None  # plain folder: path, size


def folder_files(storage: Storage) -> pa.Table:
    infos = [f for f in storage.scan("**/*") if not f.path.startswith(".nv-meta/")]
    return pa.Table.from_pydict(
        {"path": [f.path for f in infos], "size": [f.size for f in infos]}, schema=FOLDER_SCHEMA
    )


def _source_rows(con: duckdb.DuckDBPyConnection, src: AuxSource, i: int) -> str:
    """Register the source's tables and return SQL yielding (aux, name, file, byte_offset, byte_size, kind)."""
    lit = "'" + src.name.replace("'", "''") + "'"
    if src.files is not None:
        con.register(f"_files_{i}", src.files)
        return f"SELECT {lit} AS aux, path AS name, path AS file, 0::BIGINT AS byte_offset, size AS byte_size, 'file' AS kind FROM _files_{i}"
    ds = src.dataset
    con.register(
        f"_parts_{i}",
        ds._internal(
            "SELECT shard_path, sample_key, part_name::VARCHAR AS part_name, content_offset, content_size FROM sample_parts"
        ),
    )
    con.register(
        f"_samples_{i}",
        ds._internal(
            "SELECT s.sample_key, sh.path AS shard_path, s.byte_offset, s.byte_size FROM samples s JOIN shards sh USING (shard_id)"
        ),
    )
    return (
        f"SELECT {lit} AS aux, sample_key || '.' || part_name AS name, shard_path AS file, content_offset AS byte_offset, "
        f"content_size AS byte_size, 'part' AS kind FROM _parts_{i} "
        f"UNION ALL SELECT {lit}, sample_key, shard_path, byte_offset, byte_size, 'sample' FROM _samples_{i}"
    )


@dataclass
class AuxResolution:
    """The references with their resolved location: input columns plus `aux`, `aux_url`, `file`, `byte_offset`,
    `byte_size`, `kind` (part / sample / file) and `found`."""

    table: pa.Table

    @property
    def dangling(self) -> pa.Table:
        return self.table.filter(pa.compute.invert(self.table.column("found")))

    def summary(self, examples: int = 5) -> dict:
        """{aux name: {"references", "resolved", "dangling", "examples"}}."""
        con = duckdb.connect(":memory:", config=DUCKDB_CONFIG)
        try:
            con.register("r", self.table)
            rows = con.sql(
                f"""SELECT coalesce(aux, '(none)') AS aux, count(*) AS refs, count(*) FILTER (found) AS resolved,
                           list(DISTINCT ref ORDER BY ref) FILTER (NOT found)[1:{int(examples)}] AS examples
                    FROM r GROUP BY ALL ORDER BY 1"""
            ).fetchall()
        finally:
            con.close()
        return {
            aux: {"references": n, "resolved": ok, "dangling": n - ok, "examples": ex or []}
            for aux, n, ok, ex in rows
        }

    def report(self) -> str:
        lines = []
        for aux, s in self.summary().items():
            line = f"{aux}: {s['resolved']}/{s['references']} references resolved"
            if s["dangling"]:
                line += f", {s['dangling']} dangling (e.g. {', '.join(map(repr, s['examples']))})"
            lines.append(line)
        return "\n".join(lines)

    def raise_if_dangling(self) -> None:
        if self.table.num_rows and not pa.compute.all(self.table.column("found")).as_py():
            raise DanglingReferenceError("dangling references:\n" + self.report())


def resolve_references(
    refs: pa.Table, sources: Mapping[str, AuxSource], ref_column: str = "ref"
) -> AuxResolution:
    """Resolve `refs[ref_column]` against the sources; a column `aux` (when present) routes each reference to
    the source of that name, otherwise there must be exactly one source."""
    if ref_column not in refs.column_names:
        raise ValueError(
            f"references have no column {ref_column!r} (columns: {', '.join(refs.column_names)})"
        )
    if not sources:
        raise ValueError("no auxiliary sources given")
    routed = "aux" in refs.column_names
    if not routed and len(sources) > 1:
        raise ValueError(
            f"several auxiliary sources ({', '.join(sources)}): the references need an 'aux' column naming one"
        )
    con = duckdb.connect(":memory:", config=DUCKDB_CONFIG)
    try:
        union = " UNION ALL ".join(_source_rows(con, src, i) for i, src in enumerate(sources.values()))
        urls = pa.table({"aux": list(sources), "aux_url": [s.url for s in sources.values()]})
        con.register("_urls", urls)
        con.register("_refs", refs)
        con.execute(f"CREATE VIEW _names AS {union}")
        only = next(iter(sources))
        aux_expr = "r.aux" if routed else "'" + only.replace("'", "''") + "'"
        out_cols = ", ".join(f'r."{c}"' for c in refs.column_names if c != "aux")
        con.execute(
            f"CREATE TEMP TABLE _q AS SELECT *, {aux_expr} AS _aux, row_number() OVER () AS _row FROM _refs r"
        )
        # names are unique within a source except for a part stored twice in one sample: then keep the first
        sql = f"""
            SELECT {out_cols}, r._aux AS aux, u.aux_url, n.file, n.byte_offset, n.byte_size, n.kind,
                   n.name IS NOT NULL AS found, r._row
            FROM _q r LEFT JOIN _names n ON n.aux = r._aux AND n.name = r."{ref_column}"
                      LEFT JOIN _urls u ON u.aux = r._aux"""
        table = con.sql(f"{sql} ORDER BY r._row").to_arrow_table()
        if table.num_rows != refs.num_rows:
            sql += (
                " QUALIFY row_number() OVER (PARTITION BY r._row ORDER BY n.byte_offset) = 1 ORDER BY r._row"
            )
            table = con.sql(sql).to_arrow_table()
        return AuxResolution(table.drop_columns(["_row"]))
    finally:
        con.close()
