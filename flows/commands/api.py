"""`retrieval_eval.evaluate` (its `in_memory_figures`): the figures of some cases in memory, for a notebook (SPEC 12).

The cases go through the same ingest and the same steps as `retrieval-eval run` (the rules
of every record, staging, rankings, case metrics, aggregates), so the numbers are the CLI's;
nothing is written but a scratch file, removed before it returns.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from ...transforms.aggregates import aggregates, merge_partials
from ...transforms.case_metrics import cutoffs, scored_cases
from ...transforms.errors import InputError, Reject, RejectedRecords, RejectTally
from ...transforms.metrics import MAX_K
from ...transforms.rankings import retrieved_items
from ..sources.ingest import Ingest
from ..storage.duckdb_connection import connect

RUN_ID = "python"


@dataclass(frozen=True)
class Evaluation:
    """Per-case metrics and aggregates, with the columns of the warehouse views of those names."""

    case_metrics: pl.DataFrame
    aggregates: pl.DataFrame
    cases: pl.DataFrame
    rejects: list[Reject] = field(default_factory=list)


def _json_value(value: object) -> object:
    """A cell value json cannot write, as JSON: DataFrame cells hold NumPy scalars and arrays,
    and dates in fields the metrics never read."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _missing(value: object) -> bool:
    """A pandas cell that holds no value (NaN, None, NA, NaT): the field is absent."""
    import pandas as pd  # deferred: only a pandas frame's cells come here, and pandas is not a dependency

    if isinstance(value, str | list | dict | tuple) or getattr(value, "ndim", 0):
        return False
    return bool(pd.isna(value))


def _records(cases) -> tuple[str, Iterable[dict]]:
    """The name rejects give the cases and the cases as dicts. A DataFrame cell that is
    missing is an absent field; a Polars `relevance` struct has a field for every card of the
    column, null in a row that does not grade that card."""
    if isinstance(cases, pl.DataFrame):
        rows = cases.iter_rows(named=True)
        if "relevance" in cases.columns and isinstance(cases.schema["relevance"], pl.Struct):
            rows = ({**row, "relevance": _graded(row["relevance"])} for row in rows)
        return "polars.DataFrame", rows
    if type(cases).__module__.startswith("pandas"):
        rows = cases.to_dict(orient="records")
        return "pandas.DataFrame", ({key: None if _missing(value) else value for key, value in row.items()} for row in rows)
    if isinstance(cases, dict | str | bytes) or not isinstance(cases, Iterable):
        raise InputError("cases: give a cases.jsonl path, a Polars or pandas DataFrame, or an iterable of case dicts")
    return "cases", cases


def _graded(relevance: dict | None) -> dict | None:
    return None if relevance is None else {card: grade for card, grade in relevance.items() if grade is not None}


def _write_cases(records: Iterable[dict], path: Path) -> int:
    """The records as the lines of a cases.jsonl; returns how many. A value JSON does not
    allow (NaN, Infinity) is written as Python writes it, so that its record is rejected by
    its line as in a file (SPEC 6)."""
    n = 0
    with open(path, "w", encoding="utf-8") as out:
        for n, record in enumerate(records, start=1):
            try:
                out.write(json.dumps(record, ensure_ascii=False, default=_json_value) + "\n")
            except (TypeError, ValueError) as error:
                raise InputError(f"cases[{n - 1}]: not a JSON object of a case ({error})") from None
    return n


def _check_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_K:
        raise InputError(f"{name} must be an integer in [1, {MAX_K}], got {value!r}")
    return value


def in_memory_figures(cases: str | Path | pl.DataFrame | Iterable[dict], *, k: int, ks: Iterable[int] = (),
             relevance_level: int = 1, allow_rejects: bool = False, run_id: str | None = None) -> Evaluation:
    """The figures of `cases` at the headline `k` and the sweep `ks`. `cases` is a cases.jsonl
    path (or .gz), a Polars or pandas DataFrame with the case columns, or an iterable of case
    dicts. A record that breaks the rules raises RejectedRecords naming it, unless
    `allow_rejects` (then `rejects` lists them): `file:line` for a path, else the kind of the
    input and the record's number from 1 (`pandas.DataFrame:3` is its third row). `run_id`
    (default "python") is the `run_id` column of the frames."""
    ks = cutoffs(_check_int(k, "k"), [_check_int(cutoff, "ks") for cutoff in ks])
    run_id = RUN_ID if run_id is None else run_id
    if not isinstance(run_id, str) or not run_id:
        raise InputError(f"run_id must be a non-empty string, got {run_id!r}")
    _check_int(relevance_level, "relevance_level")
    with tempfile.TemporaryDirectory(prefix="retrieval-eval-") as scratch:
        scratch_dir = Path(scratch)
        if isinstance(cases, str | Path):
            source = Path(cases)
            if not source.is_file():
                raise InputError(f"{source}: no such cases file")
            name = str(source)
        else:
            source = scratch_dir / "cases.jsonl"
            name, records = _records(cases)
            if _write_cases(records, source) == 0:
                raise InputError(f"{name}: holds no cases")
        ingest = Ingest(source, scratch_dir, allow_rejects=allow_rejects, relevance_level=relevance_level)
        evaluated = {}
        with connect() as con:
            for batch in ingest.batches():
                retrieved = retrieved_items(batch.frame, run_id)
                evaluated[(batch.attempt, batch.index)] = scored_cases(batch.frame, retrieved, run_id, k, ks, con)
        account = ingest.account
        if account.refused:
            first = tuple(Reject(name, r.line, r.reason, r.raw) for r in account.rejects.tally.first)
            raise RejectedRecords(run_id, RejectTally(account.rejects.count, first), allow="allow_rejects=True")
        # The rejects the ingest streamed to the scratch folder, read before it is removed.
        rejects = [Reject(name, line, reason, raw) for frame in account.rejects.frames()
                   for line, reason, raw in frame.select("line", "reason", "raw").iter_rows()]
    mine = [evaluated[key] for key in sorted(evaluated) if key[0] == account.attempt]
    return Evaluation(
        case_metrics=pl.concat([e.case_metrics for e in mine]),
        aggregates=aggregates(merge_partials([e.partials for e in mine])),
        cases=pl.concat([e.cases for e in mine]),
        rejects=rejects,
    )
