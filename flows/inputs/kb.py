"""The knowledge base (cards.jsonl) and dataset integrity: every gold id of every run
resolves to a card (SPEC 5 `check-kb`), the report's count of those that do not, and which
KB a run's flips are judged against: the one it recorded (SPEC 16)."""

from __future__ import annotations

import io
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl

from ... import sql
from ...transforms.errors import InputError, first_lines
from ...transforms.kb_cards import card_problem
from ..sources.artifacts import RunFolder
from ..sources.ingest import split_records
from ..sources.stored_file import StoredFile, is_uri
from ..storage.duckdb_connection import connect
from ..storage.hashing import checksum_of_bytes, file_digest
from . import config

LISTED_PROBLEMS = 10


@dataclass(frozen=True)
class KnowledgeBase:
    """A KB read and judged once (`read_kb`), then handed to the report and the gate."""

    path: Path | str  # a local file, or a bucket's URI
    cards: pl.DataFrame  # id, title
    digest: str  # of the file's bytes, as a run records it (`runs.kb_digest`)
    given: bool = False  # named with --kb, so it wins over a run's own; else the default one

    @property
    def uri(self) -> str:
        """The file as a run records it (`runs.kb_uri`): its absolute path, or its URI as given
        (which never carries credentials)."""
        return str(self.path) if is_uri(self.path) else os.path.abspath(self.path)


def kb_record(kb: KnowledgeBase | None) -> dict | None:
    """What a run evaluated against `kb` records of it (the log's `source["kb"]`, beside the
    `runs` row's kb_uri and kb_digest); None: the run had no KB."""
    return None if kb is None else {"uri": kb.uri, "digest": kb.digest}


def kb_file_digest(path: Path | str) -> str:
    """Of a KB's bytes, local or in a bucket; FileNotFoundError or NotFound when it is gone."""
    if is_uri(path):
        return "blake3:" + checksum_of_bytes(StoredFile.at(path).read_bytes())
    return "blake3:" + file_digest(Path(path))


def read_kb(kb: Path | str, *, given: bool = False) -> KnowledgeBase:
    """The cards of `kb` (id, title), a local file or a bucket's object read whole, each judged
    by the rules of transforms/kb_cards.py (in Python, line by line: one verdict per card,
    whatever the other lines hold); a KB with any bad card is refused naming each by its line."""
    if is_uri(kb):
        stored = StoredFile.at(kb)
        if not stored.exists():
            raise InputError(f"{kb}: no such knowledge base file")
        data = stored.read_bytes()
        digest, opened = "blake3:" + checksum_of_bytes(data), io.BytesIO(data)
    else:
        kb = Path(kb)
        if not kb.is_file():
            raise InputError(f"{kb}: no such knowledge base file")
        digest, opened = kb_file_digest(kb), open(kb, "rb")
    cards, problems, first_line_of = [], [], {}
    with opened as lines:
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
    return KnowledgeBase(kb, pl.DataFrame(cards, schema={"id": pl.String, "title": pl.String}), digest, given)


def load_kb(con: duckdb.DuckDBPyConnection, kb: KnowledgeBase) -> None:
    """The relation kb_cards (id, title) in `con`: the cards of `kb`."""
    con.register("kb_cards", kb.cards)


def gold_not_in_kb(kb: Path | str, folders: list[RunFolder]) -> pl.DataFrame:
    """One row per (run, case, field, gold id) written in the cases files that is not a KB card
    (a cases file in a bucket is copied to a temporary folder to be read)."""
    with connect() as con, tempfile.TemporaryDirectory(prefix="retrieval-eval-check-kb-") as downloads:
        load_kb(con, read_kb(kb))
        con.execute("create temp table gold_ids (run_id varchar, case_id varchar, field varchar, gold_id varchar)")
        for folder in folders:
            cases_file = folder.local_cases_file(Path(downloads))
            try:
                con.execute("insert into gold_ids " + sql.load("gold_ids"),
                            {"path": str(cases_file), "run_id": folder.run_id})
            except duckdb.Error as error:
                raise InputError(malformed_records(cases_file, error, folder.cases_uri)) from None
        return con.sql(sql.load("gold_not_in_kb")).pl().sort(pl.all())


def malformed_records(cases_file: Path, error: duckdb.Error, shown: str) -> str:
    """What DuckDB could not read in a cases file (`shown` as the user named it), named by line
    by the record rules."""
    with open(os.devnull, "wb") as nowhere:
        rejects = split_records(cases_file, shown, nowhere).rejects
    if not rejects:  # lines the rules accept: DuckDB's own limit
        return f"{shown}: DuckDB cannot read its gold fields ({error})"
    return (f"{shown}: {len(rejects)} malformed record(s), whose gold cannot be read:\n"
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


@dataclass(frozen=True)
class RunKb:
    """The KB a run's flips are judged against (None: no flip is called `gold_not_in_kb`), and
    what the output says of it: `note` (None when there is nothing to say: the run's own KB,
    as recorded); `own` when the KB used is the run's own as recorded."""

    kb: KnowledgeBase | None
    note: str | None
    own: bool


def recorded_kb(run: dict, source: dict | None) -> dict | None | bool:
    """The KB a run recorded, from its `runs` row (kb_uri, kb_digest): {"uri", "digest"}; None
    when it was evaluated without one; False when it recorded nothing, being written by an
    earlier version (whose row has neither column, nor its log entry `source["kb"]`)."""
    if run.get("kb_uri") is not None:
        return {"uri": run["kb_uri"], "digest": run.get("kb_digest")}
    return None if source is not None and "kb" in source else False


def own_kb_problem(run_id: str, recorded: dict) -> str | None:
    """What is wrong with the KB file a run recorded (gone, or its bytes changed), or None."""
    if not StoredFile.at(recorded["uri"]).exists():
        return f"run {run_id}'s KB {recorded['uri']} is gone"
    if kb_file_digest(recorded["uri"]) != recorded["digest"]:
        return (f"run {run_id}'s KB {recorded['uri']} has changed since the run (its digest is not "
                f"{recorded['digest']})")
    return None


def run_kb(run_id: str, run: dict, source: dict | None, held: KnowledgeBase | None) -> RunKb:
    """The KB to judge run `run_id`'s flips against (SPEC 16), given its `runs` row and log
    `source`, and the KB the command `held` already (read by the job, or given with --kb).

    A KB given with --kb wins, and is named. Else the run's own, when its file is there with
    the bytes recorded. When that file is gone or changed no other KB stands in for it: no flip
    is called gold_not_in_kb, and the note says why. A run written by an earlier version
    recorded no KB: the default KB is used, and the note says so."""
    recorded = recorded_kb(run, source)
    if held is not None and held.given:
        own = isinstance(recorded, dict) and recorded == kb_record(held)
        was = f"; run {run_id} was judged against {recorded['uri']}" if isinstance(recorded, dict) and not own else ""
        return RunKb(held, f"flip reasons judged against the KB {held.uri} (given with --kb{was})", own)
    if recorded is None:
        return RunKb(None, None, True)
    if recorded is False:
        if not config.KB.is_file():
            return RunKb(None, f"run {run_id} recorded no KB (it was evaluated by an earlier version) and the "
                               f"default KB {config.KB} is not there: no flip is judged gold_not_in_kb", False)
        default = held if held is not None else read_kb(config.KB)
        return RunKb(default, f"run {run_id} recorded no KB (it was evaluated by an earlier version): flip reasons "
                              f"judged against the default KB {default.uri}", False)
    if held is not None and kb_record(held) == recorded:
        return RunKb(held, None, True)
    problem = own_kb_problem(run_id, recorded)
    if problem:
        return RunKb(None, f"{problem}: no flip could be judged gold_not_in_kb (no other KB stands in for it; give "
                           "--kb to judge them against one)", False)
    return RunKb(read_kb(recorded["uri"]), None, True)


def compared_kb_notes(runs: list[dict]) -> list[str]:
    """What `compare` says of the KBs its runs (`runs` rows) were judged against: no figure it
    prints depends on a KB, so it reads none, but it says when a run's own KB is gone or
    changed, and when the runs were judged against different KBs."""
    notes = []
    by_kb: dict[tuple[str, str], list[str]] = {}
    for run in runs:
        recorded = recorded_kb(run, None)
        if not isinstance(recorded, dict):  # judged against no KB, or by an earlier version
            continue
        by_kb.setdefault((recorded["uri"], recorded["digest"]), []).append(run["run_id"])
        problem = own_kb_problem(run["run_id"], recorded)
        if problem:
            notes.append(f"{problem} (no figure of compare depends on a KB; `gate` and the report no longer "
                         "judge this run's flips gold_not_in_kb without --kb)")
    if len(by_kb) > 1:
        listed = "; ".join(f"{uri} ({digest}): {', '.join(ids)}" for (uri, digest), ids in by_kb.items())
        notes.append(f"the runs compared were judged against different KBs: {listed}")
    return notes
