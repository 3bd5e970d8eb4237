"""Staging: Arrow tables of case records → one row per case with its gold, grades and ranked
items, checked for what Arrow's types cannot say (SPEC 2.4, 3 and 6).

flows/sources/case_file.py reads a cases file (with the strict parser or Arrow's JSON reader) into
the schemas of transforms/case_schema.py; this step only looks at the values. A record it cannot take
raises NotClean, and the line-by-line rules of transforms/records.py then judge the file.
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from .errors import NotClean

STAGED_ITEM = {"id": pl.String, "parent_id": pl.String, "score": pl.Float64}
STAGED_GRADE = {"card_id": pl.String, "grade": pl.Int64}
NO_IDS = pl.lit([], dtype=pl.List(pl.String))
NO_ITEMS = pl.lit([], dtype=pl.List(pl.Struct(STAGED_ITEM)))
STAGED_SCHEMA = {
    "case_id": pl.String,
    "locale": pl.String,
    "category": pl.String,
    "question": pl.String,
    "gold_source": pl.String,
    "gold": pl.List(pl.String),
    "grades": pl.List(pl.Struct(STAGED_GRADE)),
    "retrieved_context": pl.List(pl.Struct(STAGED_ITEM)),
}


def _missing(text: pl.Expr) -> pl.Expr:
    """Null or empty: what a required string may not be."""
    return text.is_null() | (text == "")


def stage(batch: pa.Table, relevance_level: int = 1) -> pl.DataFrame:
    """One row per case (STAGED_SCHEMA, SPEC 2.4 and 12): gold is the distinct, sorted ids of
    the relevant cards — `relevance` grades ≥ relevance_level when the case has grades, else
    `relevant_ids` when not null, else `must_cite_one_of`; grades holds every graded card with
    its grade (gain 1 for each gold card of an ungraded case); retrieved_context keeps rank
    order ([] when absent). Raises NotClean when a record breaks a rule Arrow's types do not
    state: a required field null or empty, a gold id null or empty, an item with no id or an
    empty one, a score that is not finite, a grade below 0 — or when a record carries grades
    as an object, which only the line-by-line pass can read."""
    # One chunk, not one per Arrow block (~200 a batch): the steps after it (explode,
    # windows, joins) run a third faster on contiguous columns.
    frame = pl.from_arrow(batch.combine_chunks())
    if frame.schema["relevance"] == pl.Struct([]):
        if frame["relevance"].is_not_null().any():
            raise NotClean("grades as an object")
        frame = frame.with_columns(pl.lit(None, dtype=pl.List(pl.Struct(STAGED_GRADE))).alias("relevance"))
    items = frame.select(pl.col("retrieved_context").explode(keep_nulls=False).struct.unnest())
    grades = frame.select(pl.col("relevance").explode(keep_nulls=False).struct.unnest())
    checks = [_missing(pl.col(name)).any() for name in ("case_id", "locale", "category")]
    checks += [
        _missing(pl.col(name).explode(keep_nulls=False)).any() for name in ("must_cite_one_of", "relevant_ids")
    ]
    if (
        frame.select(pl.any_horizontal(*checks)).item()
        or items.select((_missing(pl.col("id")) | ~pl.col("score").is_finite()).any()).item()
        or grades.select((_missing(pl.col("card_id")) | pl.col("grade").is_null() | (pl.col("grade") < 0)).any()).item()
    ):
        raise NotClean("a record breaks a rule")
    graded = pl.col("relevance").is_not_null()
    unit_grades = pl.col("binary_gold").list.eval(
        pl.struct(pl.element().alias("card_id"), pl.lit(1, pl.Int64).alias("grade"))
    )
    return (
        frame.with_columns(
            pl.coalesce("relevant_ids", "must_cite_one_of").list.unique().list.sort().fill_null(NO_IDS).alias("binary_gold")
        )
        .with_columns(pl.when(graded).then(pl.col("relevance")).otherwise(unit_grades).alias("grades"))
        .select(
            "case_id",
            "locale",
            "category",
            pl.coalesce("question", "query").alias("question"),
            pl.when(graded)
            .then(pl.lit("relevance"))
            .when(pl.col("relevant_ids").is_not_null())
            .then(pl.lit("relevant_ids"))
            .otherwise(pl.lit("must_cite_one_of"))
            .alias("gold_source"),
            pl.when(graded)
            .then(
                pl.col("grades")
                .list.eval(pl.element().filter(pl.element().struct.field("grade") >= relevance_level).struct.field("card_id"))
                .list.sort()
            )
            .otherwise(pl.col("binary_gold"))
            .alias("gold"),
            pl.col("grades").list.eval(pl.element().filter(pl.element().struct.field("grade") > 0)),
            pl.col("retrieved_context").fill_null(NO_ITEMS),
        )
        .cast(STAGED_SCHEMA)
    )


def empty_staged() -> pl.DataFrame:
    return pl.DataFrame(schema=STAGED_SCHEMA)
