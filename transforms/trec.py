"""TREC run files and qrels (SPEC 12), the pure steps: blocks of their lines → rows and
rejects, rows → topics ranked as trec_eval ranks them, topics and judgments → cases in the
shape of the clean copy (transforms/staging.py `CLEAN_CASES_SCHEMA`, staged by `stage`);
and on the way out, a run's ranked cards → a run file, its case metrics → `trec_eval -q`.
Reading and writing the files is flows/sources/trec_files.py's and flows/outputs/export.py's.

The reading rules, trec_eval's unless said:
- A run line is `qid Q0 docno rank score tag`, split on runs of C whitespace; the first
  six fields are read and any further ones ignored; rank is not used, and the tag of the last
  valid line is the run's `runid`, as trec_eval takes it.
- A topic is ranked by score descending, ties by docno descending in byte order; file
  order and the rank column never re-sort it.
- Where we differ: blank lines and lines whose first field starts with `#` are skipped
  (trec_eval has no comments); a docno repeated in a topic keeps its first occurrence in
  ranking order, its highest score, and the others are dropped (trec_eval refuses the file,
  "duplicate docs"); a score that is not a finite number is a reject (trec_eval's atof reads
  "high" as 0 and "inf" as infinite).
- A qrels line is `qid iter docno rel`: four fields, rel an integer. A negative rel is judged
  and not relevant (grade 0). Where we differ: a docno judged twice in a topic takes the
  later line's grade (trec_eval refuses the file); blank and `#` lines are skipped.
- A malformed line (too few fields, a score or rel that does not parse, bytes that are not
  UTF-8) is a Reject named `file:line: reason`, its raw line kept; the rest is read.
- One case per topic of either file. A topic judged but absent from the run is a labelled
  case that retrieved nothing: it scores 0 and counts, as with `trec_eval -c`. Where we
  differ: a topic without a judged document at or above the relevance level has no metric
  rows (SPEC 2.4), where trec_eval scores it 0 and counts it in num_q.

The single-space parse: each block goes through Polars' CSV parser with one space as the
separator, exact for the usual line (fields one space apart); a line it cannot have split
exactly (a tab, a run of spaces, leading blanks, a comment, too few fields) leaves a null or
a stray whitespace character in some field, and only those lines are split again on a
whitespace pattern.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import polars as pl
import pyarrow as pa

from .case_schema import CLEAN_CASES_SCHEMA
from .errors import Reject
from .metrics import BY_NAME

# C's isspace() in the "C" locale: what trec_eval splits fields on.
C_WHITESPACE = " \t\n\v\f\r"
FIELD_SEPARATORS = r"[ \t\x0B\x0C\r]+"  # within a line, so no "\n"
# Bytes that make a field of the single-space parse suspect; a CR only when it is not part
# of a CRLF line end, which Polars' parser takes as the line end.
ODD_BYTES = (b"\t", b"\v", b"\f")
LONE_CR = re.compile(rb"\r(?!\n)")
NEWLINE = ord("\n")
T = TypeVar("T")

RUN_FIELDS = ("qid", "iter", "docno", "rank", "score", "tag")
QRELS_FIELDS = ("qid", "iter", "docno", "rel")
ROW_SCHEMA = {"qid": pl.String, "docno": pl.String, "score": pl.Float64}
RETRIEVED_ITEM = pl.Struct({"id": pl.String, "parent_id": pl.String, "score": pl.Float64})
GRADE = pl.Struct({"card_id": pl.String, "grade": pl.Int64})
TOPIC_SCHEMA = {"case_id": pl.String, "retrieved_context": pl.List(RETRIEVED_ITEM), "n_duplicates": pl.Int64}
QRELS_SCHEMA = {"case_id": pl.String, "card_id": pl.String, "grade": pl.Int64}
JUDGED_SCHEMA = {"case_id": pl.String, "relevance": pl.List(GRADE)}
# Every TREC case is in one locale and one category, so its slices are `all` alone.
TREC_LOCALE, TREC_CATEGORY = "und", "trec"

# The order in which trec_eval prints measures (its measures.c), for ours.
TREC_EVAL_ORDER = ("reciprocal_rank_at_k", "precision_at_k", "recall_at_k", "ndcg_at_k", "hit_at_k")


@dataclass(frozen=True)
class Block:
    """Whole lines of a file: `data` starts at line `first_line` (1-based) and holds
    `n_lines` lines; `rejects` are lines found bad while the block was cut (one longer than
    the limit, left blank in `data`)."""

    data: bytes
    first_line: int
    n_lines: int
    rejects: tuple[Reject, ...] = ()


class TopicCameBack(Exception):
    """A topic's lines resumed after another topic began: the file's topics are not
    contiguous, and its rows must be put in topic order first."""


# ---------------------------------------------------------------- lines of a block


def _blank_invalid_utf8(block: Block, display_name: str) -> tuple[bytes, list[Reject]]:
    """The block's bytes with every line that is not UTF-8 made blank (so line numbers hold),
    and a reject for each such line. A last line without a line end that is made blank keeps
    one, or the block would lose that line."""
    rejects = []
    lines = block.data.split(b"\n")
    for i, line in enumerate(lines):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as error:
            raw = line.decode("utf-8", errors="replace").rstrip("\r")
            reason = f"not valid UTF-8 ({error.reason} at byte {error.start})"
            rejects.append(Reject(display_name, block.first_line + i, reason, raw))
            lines[i] = b""
    data = b"\n".join(lines)
    if lines[-1] == b"" and not block.data.endswith(b"\n"):
        data += b"\n"
    return data, rejects


def _utf8_safe(parse: Callable[[bytes], T], block: Block, display_name: str) -> tuple[T, list[Reject]]:
    """`parse(block bytes)` and no rejects; Polars refuses bytes that are not UTF-8 as a
    whole, and then the lines at fault become rejects and the rest is parsed again."""
    try:
        return parse(block.data), []
    except pl.exceptions.ComputeError:
        data, rejects = _blank_invalid_utf8(block, display_name)
        if not rejects:
            raise
        return parse(data), rejects


def _line_series(data: bytes, index: pl.Series) -> pl.Series:
    """Lines `index` (0-based) of `data`, line ends included, sliced out of the bytes by Arrow
    without a split in Python. Raises ComputeError when one of them is not UTF-8."""
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == NEWLINE) + 1
    if not data.endswith(b"\n"):
        ends = np.append(ends, len(data))
    offsets = np.concatenate(([0], ends)).astype(np.int64)
    lines = pa.Array.from_buffers(pa.large_binary(), len(ends), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return pl.Series("raw", lines).gather(index).cast(pl.String)


def _single_space_split(data: bytes, fields: Sequence[str]) -> pl.DataFrame:
    """Polars' CSV parser with one space as separator: a row per line (a blank line gives an
    all-null row), fields beyond `fields` dropped."""
    return pl.read_csv(
        data,
        has_header=False,
        separator=" ",
        quote_char=None,
        schema={name: pl.String for name in fields},
        truncate_ragged_lines=True,
        extra_columns="ignore",
        missing_columns="insert",
    )


def _suspect_rows(frame: pl.DataFrame, data: bytes, fields: Sequence[str]) -> pl.Series:
    """Rows the single-space split may have got wrong: a missing field (a blank line, too
    few fields, leading blanks or a run of spaces), other whitespace inside a field, or a
    comment. A byte search over the block skips the field scans when no such byte occurs."""
    suspect = pl.any_horizontal(pl.col(name).is_null() for name in fields)
    if any(odd in data for odd in ODD_BYTES) or (b"\r" in data and LONE_CR.search(data)):
        suspect = suspect | pl.any_horizontal(pl.col(name).str.contains(r"[\t\x0B\x0C\r]") for name in fields)
    if b"#" in data:
        suspect = suspect | pl.col(fields[0]).str.starts_with("#")
    return frame.select(suspect.alias("suspect")).to_series()


def _whitespace_split(raw: pl.Series, n_split: int) -> pl.DataFrame:
    """Lines split on runs of C whitespace: `kind` (blank, comment or record), `n_fields`,
    `raw` (line end removed) and field_0 .. field_{n_split-1}, the last holding the rest."""
    normal = raw.str.strip_chars(C_WHITESPACE).str.replace_all(FIELD_SEPARATORS, " ")
    frame = pl.DataFrame({"raw": raw.str.strip_chars_end("\r\n"), "text": normal})
    return frame.select(
        pl.when(pl.col("text") == "")
        .then(pl.lit("blank"))
        .when(pl.col("text").str.starts_with("#"))
        .then(pl.lit("comment"))
        .otherwise(pl.lit("record"))
        .alias("kind"),
        (pl.col("text").str.count_matches(" ", literal=True) + 1).alias("n_fields"),
        "raw",
        pl.col("text").str.splitn(" ", n_split).struct.unnest(),
    )


def _rejects(frame: pl.DataFrame, display_name: str) -> list[Reject]:
    return [Reject(display_name, line, reason, raw) for line, reason, raw in frame.select("line", "reason", "raw").iter_rows()]


# ---------------------------------------------------------------- run lines

_SCORE_PROBLEM = (
    pl.when(pl.col("score").is_null())
    .then(pl.format("score is not a number: '{}'", pl.col("score_text")))
    .when(~pl.col("score").is_finite())
    .then(pl.format("score is not finite: '{}'", pl.col("score_text")))
)


def _run_rows(data: bytes, block: Block, display_name: str) -> tuple[pl.DataFrame, list[Reject], str | None]:
    split = _single_space_split(data, RUN_FIELDS)
    if split.height == block.n_lines:
        suspect = _suspect_rows(split, data, RUN_FIELDS)
        suspect_index = suspect.arg_true().cast(pl.Int64)
        clean = split.select(
            pl.int_range(0, pl.len(), dtype=pl.Int64).alias("index"), "qid", "docno", pl.col("score").alias("score_text"),
            "tag",
        )
        if suspect_index.len():
            clean = clean.filter(~suspect)
    else:  # only a row per line keeps the line numbers: split every line again
        clean = pl.DataFrame(schema={"index": pl.Int64, "qid": pl.String, "docno": pl.String, "score_text": pl.String,
                                     "tag": pl.String})
        suspect_index = pl.int_range(0, block.n_lines, eager=True, dtype=pl.Int64)
    rejects: list[Reject] = []
    rows = clean
    if suspect_index.len():
        resplit = _whitespace_split(_line_series(data, suspect_index), len(RUN_FIELDS)).with_columns(
            suspect_index.alias("index")
        )
        records = resplit.filter(pl.col("kind") == "record")
        short = records.filter(pl.col("field_5").is_null()).with_columns(
            (pl.col("index") + block.first_line).alias("line"),
            pl.format("expected 6 fields (qid Q0 docno rank score tag), found {}", pl.col("n_fields")).alias("reason"),
        )
        rejects += _rejects(short, display_name)
        fixed = records.filter(pl.col("field_5").is_not_null()).select(
            "index", pl.col("field_0").alias("qid"), pl.col("field_2").alias("docno"), pl.col("field_4").alias("score_text"),
            pl.col("field_5").str.split(" ").list.first().alias("tag"),  # the fields after the sixth are not the tag
        )
        rows = pl.concat([clean, fixed]).sort("index")
    rows = rows.with_columns(pl.col("score_text").cast(pl.Float64, strict=False).alias("score"))
    valid = pl.col("score").is_finite().fill_null(False)  # null: not a number
    if not rows.select(valid.all()).item():
        bad = rows.filter(~valid)
        rejects += _rejects(
            bad.with_columns(
                (pl.col("index") + block.first_line).alias("line"),
                _SCORE_PROBLEM.alias("reason"),
                _line_series(data, bad["index"]).str.strip_chars_end("\r\n").alias("raw"),
            ),
            display_name,
        )
        rows = rows.filter(valid)
    last_tag = rows["tag"][-1] if rows.height else None
    return rows.select("qid", "docno", "score"), rejects, last_tag


def run_rows(block: Block, display_name: str) -> tuple[pl.DataFrame, list[Reject], str | None]:
    """The valid run lines of a block as rows (qid, docno, score) in file order, its
    malformed lines as rejects in line order, and the tag of its last valid line (trec_eval's
    `runid` is the tag of the run's last line)."""
    (rows, rejects, last_tag), not_utf8 = _utf8_safe(lambda data: _run_rows(data, block, display_name), block,
                                                     display_name)
    return rows, sorted(rejects + not_utf8 + list(block.rejects), key=lambda reject: reject.line), last_tag


_ITEM = pl.struct(pl.col("docno").alias("id"), pl.lit(None, pl.String).alias("parent_id"), "score").alias("item")


def _in_rank_order(items: pl.DataFrame) -> pl.DataFrame:
    """Rows sorted by topic, then score descending, then docno descending. Runs are mostly
    written in rank order: when no score rises and none ties within a topic, the rows
    already are, and the sort (which compares strings) is skipped."""
    same_topic = pl.col("topic") == pl.col("topic").shift(1)
    previous = pl.col("score").shift(1)
    rises, ties = items.select(
        (same_topic & (pl.col("score") > previous)).any().alias("rises"),
        (same_topic & (pl.col("score") == previous)).any().alias("ties"),
    ).row(0)
    if rises or ties:
        return items.sort(["topic", "score", "docno"], descending=[False, True, True])
    return items


def rank_topics(rows: pl.DataFrame) -> pl.DataFrame:
    """Topics (TOPIC_SCHEMA) from rows (qid, docno, score) in which each topic's rows are
    contiguous, in the order the topics come: retrieved_context ranked by score descending
    then docno descending, each docno once (its first, highest-scored occurrence), and
    n_duplicates, the occurrences dropped."""
    items = _in_rank_order(rows.with_columns(pl.col("qid").rle_id().alias("topic")))
    counts = items.group_by("topic", maintain_order=True).agg(
        (pl.len() - pl.col("docno").n_unique()).cast(pl.Int64).alias("n_duplicates")
    )
    repeated = counts.filter(pl.col("n_duplicates") > 0)["topic"]
    if repeated.len():
        # Marking repeats hashes (topic, docno) pairs: only in the topics that have them.
        in_repeated = items.select(pl.col("topic").is_in(repeated.implode())).to_series()
        first = items.filter(in_repeated).select(pl.struct("topic", "docno").is_first_distinct()).to_series()
        keep = pl.repeat(True, items.height, eager=True).scatter(in_repeated.arg_true(), first)
        items = items.filter(keep)
    topics = (
        items.with_columns(_ITEM)
        .group_by("topic", maintain_order=True)
        .agg(pl.col("qid").first().alias("case_id"), pl.col("item").alias("retrieved_context"))
    )
    return topics.with_columns(counts["n_duplicates"]).select(TOPIC_SCHEMA.keys()).cast(TOPIC_SCHEMA)


def finished_topics(rows: pl.DataFrame, finished: set[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Of rows in file order: the topics they finish, ranked, and the rows of their last
    topic, which the next rows may go on. `finished` holds the topics finished before and
    gains these; raises TopicCameBack when a topic's rows resume after another topic began."""
    segments = rows.select(pl.col("qid").rle_id()).to_series()
    ids = rows["qid"].unique().to_list()
    if len(ids) != segments[-1] + 1 or not finished.isdisjoint(ids):
        raise TopicCameBack
    n_open = int((segments == segments[-1]).sum())
    done = rows.head(rows.height - n_open)
    finished.update(done["qid"].unique().to_list())
    return rank_topics(done), rows.tail(n_open)


# ---------------------------------------------------------------- qrels lines


def _qrels_rows(data: bytes, block: Block, display_name: str) -> tuple[pl.DataFrame, list[Reject]]:
    every_line = pl.int_range(0, block.n_lines, eager=True, dtype=pl.Int64)
    split = _whitespace_split(_line_series(data, every_line), len(QRELS_FIELDS) + 1)
    records = split.with_columns((every_line + block.first_line).alias("line")).filter(pl.col("kind") == "record")
    records = records.with_columns(pl.col("field_3").cast(pl.Int64, strict=False).alias("grade"))
    problem = (
        pl.when(pl.col("n_fields") != len(QRELS_FIELDS))
        .then(pl.format("expected 4 fields (qid iter docno rel), found {}", pl.col("n_fields")))
        .when(pl.col("grade").is_null())
        .then(pl.format("relevance is not an integer: '{}'", pl.col("field_3")))
    )
    records = records.with_columns(problem.alias("reason"))
    rows = records.filter(pl.col("reason").is_null()).select(
        "line",
        pl.col("field_0").alias("case_id"),
        pl.col("field_2").alias("card_id"),
        pl.col("grade").clip(lower_bound=0),  # judged, not relevant: no gain
    )
    return rows, _rejects(records.filter(pl.col("reason").is_not_null()), display_name)


def qrels_rows(block: Block, display_name: str) -> tuple[pl.DataFrame, list[Reject]]:
    """The valid judgments of a block as rows (line, case_id, card_id, grade), and its
    malformed lines as rejects in line order. Every line goes through the whitespace split:
    qrels are small beside runs."""
    (rows, rejects), not_utf8 = _utf8_safe(lambda data: _qrels_rows(data, block, display_name), block, display_name)
    return rows, sorted(rejects + not_utf8 + list(block.rejects), key=lambda reject: reject.line)


def judgments(rows: list[pl.DataFrame]) -> pl.DataFrame:
    """One row per judged (case_id, card_id) with its grade (QRELS_SCHEMA) from the blocks'
    rows: a pair judged twice takes the later line's grade, at the place of its first line."""
    judged = pl.concat(rows) if rows else pl.DataFrame(schema={"line": pl.Int64, **QRELS_SCHEMA})
    latest = judged.group_by("case_id", "card_id").agg(pl.col("line").min(), pl.col("grade").sort_by("line").last())
    return latest.sort("line").select(QRELS_SCHEMA.keys())


def judged_topics(qrels: pl.DataFrame) -> pl.DataFrame:
    """One row per judged topic: case_id and relevance, its {card_id, grade} by card_id."""
    return (
        qrels.sort("case_id", "card_id")
        .group_by("case_id", maintain_order=True)
        .agg(pl.struct("card_id", "grade").alias("relevance"))
        .cast(JUDGED_SCHEMA)
    )


# ---------------------------------------------------------------- cases


def case_table(topics: pl.DataFrame, judged: pl.DataFrame) -> pa.Table:
    """Topics of the run (case_id, retrieved_context) as cases in CLEAN_CASES_SCHEMA, each with
    its judgments as `relevance` (null for a topic the qrels do not judge)."""
    cases = topics.select("case_id", "retrieved_context").join(judged, on="case_id", how="left", maintain_order="left")
    return _as_clean_cases(cases)


def unretrieved_cases(judged: pl.DataFrame, ran: pl.Series) -> pa.Table:
    """The judged topics not in `ran` (the topics of the run), as cases that retrieved nothing."""
    missing = judged.filter(~pl.col("case_id").is_in(ran.implode()))
    return _as_clean_cases(missing.with_columns(pl.lit([], dtype=pl.List(RETRIEVED_ITEM)).alias("retrieved_context")))


def _as_clean_cases(cases: pl.DataFrame) -> pa.Table:
    none = pl.lit(None, pl.String)
    frame = cases.select(
        "case_id",
        pl.lit(TREC_LOCALE).alias("locale"),
        pl.lit(TREC_CATEGORY).alias("category"),
        none.alias("question"),
        none.alias("query"),
        pl.lit(None, pl.List(pl.String)).alias("must_cite_one_of"),
        pl.lit(None, pl.List(pl.String)).alias("relevant_ids"),
        "retrieved_context",
        "relevance",
    )
    return frame.to_arrow(compat_level=pl.CompatLevel.oldest()).cast(CLEAN_CASES_SCHEMA)


# ---------------------------------------------------------------- writing


def trec_run_text(cards: pl.DataFrame, tag: str) -> str:
    """Lines `qid Q0 docno rank score tag` of ranked cards (case_id, card_id, card_rank,
    trec_score), in the order given (sql/export_ranked_cards.sql says the score rule; ids a
    field cannot hold were refused before, sql/export_unwritable_ids.sql)."""
    return cards.select(
        "case_id", pl.lit("Q0").alias("iter"), "card_id", "card_rank", "trec_score", pl.lit(tag).alias("tag")
    ).write_csv(separator=" ", include_header=False, quote_style="never", float_precision=None)


def unwritable_topics(case_ids: pl.Series, limit: int = 5) -> list[str]:
    """The first case ids (in byte order) that cannot be one field of a `trec_eval -q` line:
    those holding whitespace (C isspace: what the layout's readers split on), and `all`, the
    topic of its summary lines."""
    holding = case_ids.filter(case_ids.str.contains(r"[ \t\n\v\f\r]") | (case_ids == "all")).unique().to_list()
    return sorted(holding, key=str.encode)[:limit]


def trec_eval_q_text(case_metrics: pl.DataFrame, k: int, runid: str) -> str:
    """Per-case metrics at cutoff `k` as `trec_eval -q` prints them: for each case in byte
    order of case_id, our metrics in trec_eval's print order under their trec_eval names
    (transforms/metrics.py), `name<TAB>case<TAB>value` with the name in 22 columns and the
    value as %6.4f; then the `all` lines: runid, num_q (the cases) and each mean."""
    chosen = [BY_NAME[name] for name in TREC_EVAL_ORDER]
    rows = case_metrics.filter(pl.col("k") == k).sort(pl.col("case_id").cast(pl.Binary))
    lines = []
    for row in rows.select("case_id", *[m.name for m in chosen]).iter_rows(named=True):
        lines += [f"{m.trec_eval_name(k):<22}\t{row['case_id']}\t{row[m.name]:6.4f}" for m in chosen]
    lines += [f"{'runid':<22}\tall\t{runid}", f"{'num_q':<22}\tall\t{rows.height}"]
    means = rows.select(pl.col(m.name).mean() for m in chosen).row(0) if rows.height else [0.0] * len(chosen)
    lines += [f"{m.trec_eval_name(k):<22}\tall\t{mean:6.4f}" for m, mean in zip(chosen, means, strict=True)]
    return "".join(line + "\n" for line in lines)
