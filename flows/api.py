"""`retrieval_eval.evaluate`: the figures of some cases in memory, for a notebook (SPEC 12).

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

from ..transforms.aggregates import aggregates, merge_partials
from ..transforms.case_metrics import cutoffs, evaluate_cases
from ..transforms.errors import InputError, Reject, RejectedRecords
from ..transforms.rankings import retrieved_items
from .engine import connect
from .ingest import Ingest

RUN_ID = "python"


@dataclass(frozen=True)
class Evaluation:
    """Per-case metrics and aggregates, with the columns of the warehouse views of those names."""

    case_metrics: pl.DataFrame
    aggregates: pl.DataFrame
    cases: pl.DataFrame
    rejects: list[Reject] = field(default_factory=list)


def _write_cases(cases, path: Path) -> None:
    """Cases of any accepted kind as a cases.jsonl."""
    if isinstance(cases, pl.DataFrame):
        cases.write_ndjson(path)
        return
    if type(cases).__module__.startswith("pandas"):
        cases.to_json(path, orient="records", lines=True, force_ascii=False)
        return
    if isinstance(cases, dict | str | bytes):
        raise InputError("cases: give a path, a DataFrame or an iterable of case dicts")
    with open(path, "w", encoding="utf-8") as out:
        for number, record in enumerate(cases, start=1):
            try:
                out.write(json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n")
            except (TypeError, ValueError) as error:
                raise InputError(f"cases[{number - 1}]: not a JSON object of a case ({error})") from None


def evaluate(cases: str | Path | pl.DataFrame | Iterable[dict], *, k: int, ks: Iterable[int] = (),
             relevance_level: int = 1, allow_rejects: bool = False, run_id: str = RUN_ID) -> Evaluation:
    """The figures of `cases` at the headline `k` and the sweep `ks`. `cases` is a cases.jsonl
    path (or .gz), a Polars or pandas DataFrame with the case columns, or an iterable of case
    dicts. A record that breaks the rules raises RejectedRecords naming it, unless
    `allow_rejects` (then `rejects` lists them)."""
    ks = cutoffs(k, ks)
    with tempfile.TemporaryDirectory(prefix="retrieval-eval-") as scratch:
        scratch_dir = Path(scratch)
        if isinstance(cases, str | Path):
            source = Path(cases)
            if not source.is_file():
                raise InputError(f"{source}: no such cases file")
        else:
            source = scratch_dir / "cases.jsonl"
            _write_cases(cases, source)
        ingest = Ingest(source, scratch_dir, allow_rejects=allow_rejects, relevance_level=relevance_level)
        evaluated = {}
        with connect() as con:
            for batch in ingest.batches():
                retrieved = retrieved_items(batch.frame, run_id)
                evaluated[(batch.attempt, batch.index)] = evaluate_cases(batch.frame, retrieved, run_id, ks, con)
    account = ingest.account
    if account.refused:
        raise RejectedRecords(run_id, account.rejects)
    mine = [evaluated[key] for key in sorted(evaluated) if key[0] == account.attempt]
    return Evaluation(
        case_metrics=pl.concat([e.case_metrics for e in mine]),
        aggregates=aggregates(merge_partials([e.partials for e in mine])),
        cases=pl.concat([e.cases for e in mine]),
        rejects=account.rejects,
    )
