"""`retrieval-eval export RUN_ID --format ...` (SPEC 12): one run of the warehouse written for
other tools. `trec-run` is a run file trec_eval reads, rebuilt from the `retrieved` view
(sql/export_ranked_cards.sql); `trec-eval` is the run's per-case figures at one cutoff in the
layout of `trec_eval -q`; `csv` and `parquet` are its `case_metrics` rows
(sql/export_case_metrics.sql). Rows stream from DuckDB in batches, so a run of any depth is
written holding one batch; a file is written aside and moved into place when complete (a
symlink's target likewise; a device, a FIFO or /dev/stdout directly), a URI's object put whole
once written (flows/storage/output_files.py `written_to`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import duckdb
import polars as pl
import pyarrow.parquet as pq

from ... import sql
from ...transforms.errors import InputError
from ...transforms.trec import trec_eval_q_text, trec_run_text, unwritable_topics
from ..storage.locations import Location
from ..storage.output_files import output_file, written_to
from ..warehouse.committed import read_state
from ..warehouse.views import naming_damage, open_reader
from ..warehouse.warehouse import Warehouse

FORMATS = ("trec-run", "trec-eval", "csv", "parquet")
FETCH_ROWS = 1 << 20


@contextmanager
def _output(out: Path | Location | None, binary: bool) -> Iterator[IO]:
    """`out`, a path or a URI (as flows/storage/output_files.py `written_to` writes it: nothing
    half-written is ever seen there), or stdout."""
    if out is None:
        yield sys.stdout.buffer if binary else sys.stdout
        sys.stdout.flush()
        return
    with written_to(out, binary=binary) as handle:
        yield handle


def export_run(warehouse: Warehouse, run_id: str, fmt: str, out: str | Path | None = None,
               k: int | None = None) -> int:
    """Write run `run_id` of the warehouse in format `fmt` to `out` (stdout when None);
    returns the number of rows (lines, for the TREC formats) written."""
    if fmt not in FORMATS:
        raise InputError(f"export: format {fmt!r} is not one of {', '.join(FORMATS)}")
    if fmt == "parquet" and out is None:
        raise InputError("export --format parquet writes a file: give --out FILE")
    out = None if out is None else output_file(out)  # a location refused before any work
    state = read_state(warehouse)
    if run_id not in state.runs:
        raise InputError(f"export: run {run_id!r} is not in {warehouse.name} (runs: {', '.join(sorted(state.runs))})")
    tables = ("runs", "retrieved") if fmt == "trec-run" else ("runs", "case_metrics")
    with open_reader(warehouse, state, [run_id], tables, every_byte=True) as con, naming_damage(warehouse, state):
        run = con.table("runs").pl().row(0, named=True)
        if fmt == "trec-run":
            return _trec_run(con, run_id, run_tag(run), out)
        if k is not None and k not in run["ks"]:
            raise InputError(f"export: run {run_id} has case metrics at k in {run['ks']}, not at --k {k}")
        if fmt == "trec-eval":
            return _trec_eval(con, run_id, run_tag(run), k or run["headline_k"], out)
        return _case_metrics(con, run_id, k, fmt, out)


def run_tag(run: dict) -> str:
    """The name a run gives itself in TREC files (the tag column, trec_eval's `runid`): the tag
    its own TREC run file carried, else its run id."""
    tag = json.loads(run["config"] or "{}").get("tag")
    return tag if isinstance(tag, str) and tag else run["run_id"]


def _trec_run(con: duckdb.DuckDBPyConnection, run_id: str, tag: str, out: Path | Location | None) -> int:
    unwritable = con.sql(sql.load("export_unwritable_ids"), params={"run_id": run_id}).fetchall()
    if unwritable:
        shown = ", ".join(f"{kind} {value!r}" for kind, value in unwritable)
        raise InputError(f"export: run {run_id} cannot be a TREC run file: {shown} (whitespace, or a case id "
                         "opening with #)")
    n = 0
    with _output(out, binary=False) as handle:
        for batch in con.sql(sql.load("export_ranked_cards"), params={"run_id": run_id}).to_arrow_reader(FETCH_ROWS):
            handle.write(trec_run_text(pl.from_arrow(batch), tag=tag))
            n += batch.num_rows
    return n


def _trec_eval(con: duckdb.DuckDBPyConnection, run_id: str, tag: str, k: int, out: Path | Location | None) -> int:
    case_metrics = con.sql(sql.load("export_case_metrics"), params={"run_id": run_id, "k": k}).pl()
    unwritable = unwritable_topics(case_metrics["case_id"])
    if unwritable:
        shown = ", ".join(f"case id {case_id!r}" for case_id in unwritable)
        raise InputError(f"export: run {run_id} cannot be written in trec_eval's -q layout: {shown} (whitespace, "
                         "or `all`, the topic of its summary lines)")
    text = trec_eval_q_text(case_metrics, k, tag)
    with _output(out, binary=False) as handle:
        handle.write(text)
    return text.count("\n")


def _case_metrics(con: duckdb.DuckDBPyConnection, run_id: str, k: int | None, fmt: str,
                  out: Path | Location | None) -> int:
    reader = con.sql(sql.load("export_case_metrics"), params={"run_id": run_id, "k": k}).to_arrow_reader(FETCH_ROWS)
    n = 0
    with _output(out, binary=True) as handle:
        if fmt == "parquet":
            with pq.ParquetWriter(handle, reader.schema) as writer:
                for batch in reader:
                    writer.write_batch(batch)
                    n += batch.num_rows
            return n
        pl.from_arrow(reader.schema.empty_table()).write_csv(handle)  # the header, also of no rows
        for batch in reader:
            pl.from_arrow(batch).write_csv(handle, include_header=False)
            n += batch.num_rows
    return n
