"""The knowledge base (cards.jsonl) and dataset integrity: every gold id of every run
resolves to a card (SPEC 5 `check-kb`), and the report's count of those that do not."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl

from .. import sql
from ..transforms.errors import InputError, first_lines
from ..transforms.kb_cards import card_problem
from .artifacts import RunFolder
from .engine import connect
from .ingest import split_records

LISTED_PROBLEMS = 10


@dataclass(frozen=True)
class KnowledgeBase:
    """A KB read and judged once (`read_kb`), then handed to the report and the gate."""

    path: Path
    cards: pl.DataFrame  # id, title


def read_kb(kb: Path) -> KnowledgeBase:
    """The cards of `kb` (id, title), each judged by the rules of transforms/kb_cards.py (in
    Python, line by line: one verdict per card, whatever the other lines hold); a KB with any
    bad card is refused naming each by its line."""
    if not kb.is_file():
        raise InputError(f"{kb}: no such knowledge base file")
    cards, problems, first_line_of = [], [], {}
    with open(kb, "rb") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            problem, card = card_problem(line, first_line_of, number)
            if problem:
                problems.append(f"{kb}:{number}: {problem}")
            else:
                cards.append(card)
    if problems:
        raise InputError(f"{kb}: not a valid cards.jsonl ({len(problems)} bad card(s)):\n"
                         + first_lines(problems, LISTED_PROBLEMS))
    return KnowledgeBase(kb, pl.DataFrame(cards, schema={"id": pl.String, "title": pl.String}))


def load_kb(con: duckdb.DuckDBPyConnection, kb: KnowledgeBase) -> None:
    """The relation kb_cards (id, title) in `con`: the cards of `kb`."""
    con.register("kb_cards", kb.cards)


def gold_not_in_kb(kb: Path, folders: list[RunFolder]) -> pl.DataFrame:
    """One row per (run, case, field, gold id) written in the cases files that is not a KB card."""
    with connect() as con:
        load_kb(con, read_kb(kb))
        con.execute("create temp table gold_ids (run_id varchar, case_id varchar, field varchar, gold_id varchar)")
        for folder in folders:
            try:
                con.execute("insert into gold_ids " + sql.load("gold_ids"),
                            {"path": str(folder.cases_file), "run_id": folder.run_id})
            except duckdb.Error as error:
                raise InputError(malformed_records(folder.cases_file, error)) from None
        return con.sql(sql.load("gold_not_in_kb")).pl().sort(pl.all())


def malformed_records(cases_file: Path, error: duckdb.Error) -> str:
    """What DuckDB could not read in a cases file, named by line by the record rules."""
    with open(os.devnull, "wb") as nowhere:
        rejects = split_records(cases_file, str(cases_file), nowhere).rejects
    if not rejects:  # lines the rules accept: DuckDB's own limit
        return f"{cases_file}: DuckDB cannot read its gold fields ({error})"
    return (f"{cases_file}: {len(rejects)} malformed record(s), whose gold cannot be read:\n"
            + first_lines([r.describe() for r in rejects], LISTED_PROBLEMS))


def unknown_gold_counts(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> pl.DataFrame:
    """Per run of `run_ids`, how many effective gold ids are not KB cards, in how many cases
    (run_id, n_ids, n_cases); `con` has the `cases` view and kb_cards (`load_kb`)."""
    return con.sql(sql.load("kb_unknown_gold"), params={"ids": run_ids}).pl()


def unknown_gold(kb: KnowledgeBase | None, cases: list[pl.DataFrame]) -> set[str] | None:
    """The gold ids of `cases` (frames with a `gold` list column) that are not cards of `kb`
    (None without a KB): what a flip's reason `gold_not_in_kb` is told by, in the gate and
    in the report's what changed."""
    if kb is None:
        return None
    gold = pl.concat([frame.select(pl.col("gold").explode()) for frame in cases])["gold"].drop_nulls().unique()
    return set(gold.to_list()) - set(kb.cards["id"].to_list())


def kb_titles(kb: KnowledgeBase) -> dict[str, str | None]:
    """Card id → title."""
    return dict(kb.cards.select("id", "title").iter_rows())
