"""Golden tests of every SQL model (sql/*.sql), SQLMesh-style: tiny input rows, expected rows
worked out by hand beside them, intermediate CTEs included; and each data audit of
sql/audits/ catches the one bad row it is about."""

from __future__ import annotations

import json
import math
import re

import duckdb
import polars as pl
import pytest
from retrieval_eval import sql

RANKED_GRADE = pl.Struct({"rank": pl.Int32, "grade": pl.Int64})


def model(name: str, cte: str | None = None) -> str:
    """A model's SQL, or its SQL up to one of its CTEs (every model ends `select * from final`)."""
    text = sql.load(name)
    if cte is None:
        return text
    body, tail = text.rsplit("select * from final", 1)
    # A CTE is a name, which no parameter can stand for: only a CTE the model defines is taken.
    assert re.search(rf"(^|\bwith |,\s*){re.escape(cte)} as \(", body, re.MULTILINE), f"{name} has no CTE {cte}"
    return body + "select * from " + cte + tail


def run(con: duckdb.DuckDBPyConnection, name: str, cte: str | None = None, **params) -> list[dict]:
    return con.sql(model(name, cte), params=params or None).pl().to_dicts()


def cases_frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={
        "run_id": pl.String, "case_id": pl.String, "locale": pl.String, "category": pl.String,
        "n_gold": pl.Int64, "n_cards": pl.Int64, "relevant_ranks": pl.List(pl.Int32),
        "graded_ranks": pl.List(RANKED_GRADE), "ideal_gains": pl.List(pl.Int64),
    })


def test_case_metrics_model_by_hand():
    con = duckdb.connect()
    con.register("cases", cases_frame([
        # gold {A, B} (grade 1) at ranks 1 and 3 of 4 distinct cards
        {"run_id": "r", "case_id": "binary", "locale": "en", "category": "g", "n_gold": 2, "n_cards": 4,
         "relevant_ranks": [1, 3], "graded_ranks": [{"rank": 1, "grade": 1}, {"rank": 3, "grade": 1}],
         "ideal_gains": [1, 1]},
        # grades {A: 3, B: 1}: B at rank 1, A at rank 3 (SPEC 12)
        {"run_id": "r", "case_id": "graded", "locale": "en", "category": "g", "n_gold": 2, "n_cards": 3,
         "relevant_ranks": [1, 3], "graded_ranks": [{"rank": 1, "grade": 1}, {"rank": 3, "grade": 3}],
         "ideal_gains": [3, 1]},
        {"run_id": "r", "case_id": "unlabelled", "locale": "en", "category": "g", "n_gold": 0, "n_cards": 2,
         "relevant_ranks": [], "graded_ranks": [], "ideal_gains": []},
    ]))
    assert [r["case_id"] for r in run(con, "case_metrics", "labelled", ks=[2])] == ["binary", "graded"]
    per_cutoff = {(r["case_id"], r["k"]): r["hit_ranks"] for r in run(con, "case_metrics", "per_cutoff", ks=[2, 4])}
    assert per_cutoff == {("binary", 2): [1], ("binary", 4): [1, 3], ("graded", 2): [1], ("graded", 4): [1, 3]}
    gains = {(r["case_id"], r["k"]): (r["dcg"], r["idcg"]) for r in run(con, "case_metrics", "gains", ks=[2, 4])}
    # binary k=4: DCG = 1/log2(2) + 1/log2(4) = 1.5; IDCG = 1 + 1/log2(3) = 1.630930
    assert gains[("binary", 4)] == pytest.approx((1.5, 1 + 1 / math.log2(3)))
    # graded k=4: DCG = 1/log2(2) + 3/log2(4) = 2.5; IDCG = 3/log2(2) + 1/log2(3) = 3.630930
    assert gains[("graded", 4)] == pytest.approx((2.5, 3 + 1 / math.log2(3)))
    # graded k=2: DCG = 1 (only B within 2); IDCG = 3 + 1/log2(3)
    assert gains[("graded", 2)] == pytest.approx((1.0, 3 + 1 / math.log2(3)))
    final = {(r["case_id"], r["k"]): r for r in run(con, "case_metrics", ks=[2, 4])}
    binary = final[("binary", 4)]
    assert (binary["hit_at_k"], binary["recall_at_k"], binary["precision_at_k"], binary["reciprocal_rank_at_k"],
            binary["first_relevant_rank"], binary["k_beyond_depth"]) == (1.0, 1.0, 0.5, 1.0, 1, False)
    assert binary["ndcg_at_k"] == pytest.approx(1.5 / (1 + 1 / math.log2(3)))  # 0.919721
    assert final[("graded", 4)]["ndcg_at_k"] == pytest.approx(2.5 / (3 + 1 / math.log2(3)))  # 0.688529
    assert final[("graded", 4)]["k_beyond_depth"] is True  # 3 distinct cards captured, k = 4
    assert final[("graded", 2)]["gains_at_k"] == [{"rank": 1, "grade": 1}]
    assert final[("binary", 2)]["recall_at_k"] == 0.5 and final[("binary", 2)]["precision_at_k"] == 0.5


@pytest.fixture
def warehouse_views():
    con = duckdb.connect()
    con.register("runs", pl.DataFrame({
        "run_id": ["new", "old"], "created_at": ["2026-11-02T00:00:00+05:00", "2026-11-01T22:00:00Z"],
        "created_at_utc": pl.Series(["2026-11-01T19:00:00", "2026-11-01T22:00:00"]).str.to_datetime().dt.replace_time_zone("UTC"),
        "headline_k": [4, 2], "ks": [[1, 4], [2]],
    }))
    con.register("aggregates", pl.DataFrame({
        "run_id": ["new", "new", "new", "old"], "k": [4, 1, 1, 2], "slice": ["locale", "all", "locale", "all"],
        "slice_value": ["en", "all", "en", "all"], "metric": ["hit_at_k"] * 4, "mean": [0.5, 0.25, 0.25, 1.0],
    }))
    con.register("case_metrics", pl.DataFrame({
        "run_id": ["new", "new", "old"], "case_id": ["a", "a", "a"], "k": [4, 1, 2], "hit_at_k": [1.0, 0.0, 1.0],
        "first_relevant_rank": [2, 2, 1],
    }))
    con.register("cases", pl.DataFrame({
        "run_id": ["new", "old"], "case_id": ["a", "a"], "gold": [["X", "Y"], ["X"]], "question": ["q?", None],
        "n_retrieved": [3, 1], "gold_source": ["must_cite_one_of"] * 2,
        "top_cards": [["Z", "Y"], ["X"]], "top_scores": [[0.9, 0.8], [None]], "n_cards": [2, 1],
    }))
    con.register("kb_cards", pl.DataFrame({"id": ["X", "Z"], "title": ["x", "z"]}))
    return con


def test_report_runs_orders_by_the_instant_of_created_at(warehouse_views):
    # "new" was created at 19:00 UTC (its text, 2026-11-02, sorts after the other's).
    assert [r["run_id"] for r in run(warehouse_views, "report_runs")] == ["new", "old"]


def test_report_aggregates_keep_the_headline_k_and_slice_all(warehouse_views):
    rows = {(r["run_id"], r["k"], r["slice"]) for r in run(warehouse_views, "report_aggregates")}
    # new: locale at its headline k 4, slice all at k 1; not locale at k 1. old: all at 2.
    assert rows == {("new", 4, "locale"), ("new", 1, "all"), ("old", 2, "all")}


def test_report_cases_at_one_k_with_the_cases_top_cards(warehouse_views):
    con = warehouse_views
    # Run "new" (headline k 4): a hits at rank 2, b first meets gold at rank 6, c never does.
    # Run "old" was evaluated at k 2 only: its row at k 4 comes computed, beside the stored.
    stored = pl.DataFrame({
        "run_id": ["new", "new", "new", "new", "old"], "case_id": ["a", "a", "b", "c", "a"], "k": [4, 1, 4, 4, 2],
        "hit_at_k": [1.0, 0.0, 0.0, 0.0, 1.0], "first_relevant_rank": [2, 2, 6, None, 1],
        "gains_at_k": [[{"rank": 2, "grade": 1}], [], [], [], [{"rank": 1, "grade": 1}]],
    })
    con.register("case_metrics", stored)
    con.register("computed_case_metrics", pl.DataFrame({
        "run_id": ["old"], "case_id": ["a"], "k": [4], "hit_at_k": [1.0], "first_relevant_rank": [1],
        "gains_at_k": [[{"rank": 1, "grade": 1}]],
    }))
    seven = [f"P{rank}" for rank in range(1, 8)]
    con.register("cases", pl.DataFrame({
        "run_id": ["new", "new", "new", "old"], "case_id": ["a", "b", "c", "a"],
        "gold": [["X", "Y"], ["P6"], ["Q"], ["X"]], "question": ["q?", None, None, None],
        "n_retrieved": [9, 7, 7, 1], "top_cards": [["Z", "Y", "W", "V", "U"], seven, seven, ["X"]],
        "top_scores": [[5.0, 4.0, 3.0, 2.0, 1.0], [7.0 - r for r in range(7)], [None] * 7, [None]],
        "n_cards": [5, 7, 7, 1], "gold_source": ["must_cite_one_of"] * 4,
        "graded_ranks": [[{"rank": 2, "grade": 1}], [{"rank": 6, "grade": 1}], [], [{"rank": 1, "grade": 1}]],
        "ideal_gains": [[1, 1], [1], [1], [1]],
    }))
    rows = {r["case_id"]: r for r in run(con, "report_cases", ids=["new"], k=4)}
    assert (rows["a"]["k"], rows["a"]["gold"], rows["a"]["question"], rows["a"]["n_retrieved"], rows["a"]["n_cards"]) == (
        4, ["X", "Y"], "q?", 9, 5)
    assert "gains_at_k" not in rows["a"]  # nothing in the report reads it
    # the cards down to k = 4, or down to the first gold card when that is deeper
    assert {case_id: row["cards"] for case_id, row in rows.items()} == {
        "a": ["Z", "Y", "W", "V"], "b": seven[:6], "c": seven[:4]}
    # each card's score, cut with it
    assert {case_id: row["card_scores"] for case_id, row in rows.items()} == {
        "a": [5.0, 4.0, 3.0, 2.0], "b": [7.0, 6.0, 5.0, 4.0, 3.0, 2.0], "c": [None] * 4}
    both = {(r["run_id"], r["case_id"]): (r["k"], r["hit_at_k"], r["cards"])
            for r in run(con, "report_cases", ids=["new", "old"], k=4)}
    assert both[("old", "a")] == (4, 1.0, ["X"])  # the computed row; "old" holds one card
    assert len(both) == 4
    assert run(con, "report_cases", ids=["old"], k=2)[0]["hit_at_k"] == 1.0  # the stored row at k 2


def test_case_metrics_with_gold_at_k(warehouse_views):
    assert [(r["run_id"], r["gold"], r["n_retrieved"]) for r in run(warehouse_views, "case_metrics_with_gold", k=2)] == [
        ("old", ["X"], 1)]


def test_kb_unknown_gold_counts_ids_and_cases(warehouse_views):
    assert run(warehouse_views, "kb_unknown_gold", "unknown", ids=["new", "old"]) == [
        {"run_id": "new", "case_id": "a", "field": "must_cite_one_of", "gold_id": "Y"}]
    assert run(warehouse_views, "kb_unknown_gold", ids=["new", "old"]) == [
        {"run_id": "new", "n_ids": 1, "n_cases": 1}]


def test_gold_ids_read_their_file_and_gold_not_in_kb(tmp_path):
    con = duckdb.connect()
    cases = tmp_path / "cases.jsonl"
    cases.write_text("\n".join(json.dumps(r) for r in [
        {"case_id": "a", "must_cite_one_of": ["X"], "relevant_ids": None},
        {"case_id": "b", "relevance": {"Y": 2, "Z": 0}},
    ]) + "\n")
    rows = sorted((r["case_id"], r["field"], r["gold_id"]) for r in run(con, "gold_ids", path=str(cases), run_id="r"))
    assert rows == [("a", "must_cite_one_of", "X"), ("b", "relevance", "Y"), ("b", "relevance", "Z")]
    con.register("gold_ids", pl.DataFrame({"run_id": ["r", "r"], "case_id": ["a", "b"], "field": ["f", "f"],
                                           "gold_id": ["X", "Q"]}))
    con.register("kb_cards", pl.DataFrame({"id": ["X"], "title": ["x"]}))
    assert run(con, "gold_not_in_kb") == [{"run_id": "r", "case_id": "b", "field": "f", "gold_id": "Q"}]


def audit_views(**changes) -> duckdb.DuckDBPyConnection:
    """One whole, consistent run as the audits read it, with `changes` applied to its tables."""
    tables = {
        "runs": pl.DataFrame({"run_id": ["r"], "n_cases": [1], "n_labelled": [1], "ks": [[1, 2]], "relevance_level": [1],
                              "kb_uri": ["/kb/cards.jsonl"], "kb_digest": ["blake3:" + "0" * 64]}),
        "cases": pl.DataFrame({"run_id": ["r"], "case_id": ["a"], "n_retrieved": [2]}),
        "retrieved": pl.DataFrame({"run_id": ["r", "r"], "case_id": ["a", "a"], "rank": [1, 2]}),
        "case_metrics": pl.DataFrame({
            "run_id": ["r", "r"], "case_id": ["a", "a"], "k": [1, 2], "hit_at_k": [0.0, 1.0],
            "recall_at_k": [0.0, 0.5], "ndcg_at_k": [0.0, 0.4], "precision_at_k": [0.0, 0.5],
            "reciprocal_rank_at_k": [0.0, 0.5], "first_relevant_rank": [2, 2]}),
        "aggregates": pl.DataFrame({"run_id": ["r"], "k": [1], "slice": ["all"], "slice_value": ["all"],
                                    "metric": ["hit_at_k"], "mean": [0.0], "n": [1], "ci_low": [0.0], "ci_high": [0.79]}),
    }
    for name, change in changes.items():
        tables[name] = change(tables[name])
    con = duckdb.connect()
    for name, frame in tables.items():
        con.register(name, frame)
    return con


@pytest.mark.parametrize("spoil, audit, detail", [
    ({}, None, None),
    ({"cases": lambda f: pl.concat([f, f])}, "unique_keys", "cases a appears 2 times"),
    ({"case_metrics": lambda f: f.with_columns(pl.Series("ndcg_at_k", [0.0, 1.2]))}, "metric_bounds", "out of [0, 1]"),
    ({"aggregates": lambda f: f.with_columns(pl.lit(0.9).alias("mean"))}, "metric_bounds", "out of bounds"),
    ({"case_metrics": lambda f: f.with_columns(pl.Series("recall_at_k", [0.5, 0.5]))}, "metric_order", "k=1"),
    ({"case_metrics": lambda f: f.with_columns(pl.Series("ndcg_at_k", [0.3, 0.4]))}, "metric_order", "k=1"),
    # at relevance level 2 a card graded 1 adds nDCG gain without a hit (trec_eval's ndcg_cut)
    ({"case_metrics": lambda f: f.with_columns(pl.Series("ndcg_at_k", [0.3, 0.4])),
      "runs": lambda f: f.with_columns(pl.lit(2).alias("relevance_level"))}, None, None),
    ({"case_metrics": lambda f: f.with_columns(pl.Series("hit_at_k", [1.0, 0.0]), pl.Series("first_relevant_rank", [1, None]),
                                              pl.Series("recall_at_k", [0.0, 0.0]), pl.Series("ndcg_at_k", [0.0, 0.0]),
                                              pl.Series("reciprocal_rank_at_k", [0.0, 0.0]))}, "monotone_in_k", "falls at k=2"),
    ({"retrieved": lambda f: f.head(1)}, "run_accounts", "retrieved 1 of 2"),
])
def test_each_audit_catches_its_bad_row(spoil, audit, detail):
    con = audit_views(**spoil)
    found = [(name, row) for name, text in sql.audits().items() for row in con.execute(text).fetchall()]
    if audit is None:
        assert found == []
        return
    assert any(name == audit and detail in row[2] for name, row in found), found


def test_every_model_is_named_states_its_grain_and_ends_in_final():
    from importlib.resources import files

    models = [item for item in files("retrieval_eval.sql").iterdir() if item.name.endswith(".sql")]
    assert len(models) >= 9
    for item in models:
        text = item.read_text()
        header = "".join(line for line in text.splitlines() if line.startswith("--"))
        assert text.startswith(f"-- {item.name.removesuffix('.sql')}:"), item.name
        assert "Grain" in header and "Columns" in header, item.name
        assert re.search(r"select \* from final\s*(order by [^;]*)?$", text.strip()), item.name


def test_parts_written_before_later_columns_read_with_their_defaults():
    """A run committed by the first warehouse format keeps its parts (flows/warehouse/views.py
    LATER_COLUMNS): the views add what it lacks, derived where its columns allow."""
    from datetime import datetime, timezone

    from retrieval_eval.flows.storage.duckdb_connection import connect
    from retrieval_eval.flows.warehouse.views import with_later_columns
    from retrieval_eval.transforms.run_summary import IDENTITY_COUNTS

    con = connect()
    old_runs = pl.DataFrame({"run_id": ["old"], "created_at": ["2026-11-02T02:00:00+05:00"]})
    [row] = with_later_columns(con.from_arrow(old_runs.to_arrow()), "runs", mixed=False).pl().to_dicts()
    assert row["created_at_utc"] == datetime(2026, 11, 1, 21, tzinfo=timezone.utc) and row["relevance_level"] == 1
    # Old and new parts in one view: the old run's rows are null in the new columns, filled.
    mixed = pl.DataFrame({
        "run_id": ["old", "new"], "created_at": ["2026-11-02T02:00:00Z", "2026-11-09T02:00:00Z"],
        "created_at_utc": pl.Series([None, "2026-11-09T02:00:00"]).str.to_datetime().dt.replace_time_zone("UTC"),
        "relevance_level": [None, 2],
        "kb_uri": [None, "/kb/cards.jsonl"], "kb_digest": [None, "blake3:" + "0" * 64],
        **{name: [None, 1] for name in IDENTITY_COUNTS},  # SPEC 15: null but for another tool's run
    })
    rows = with_later_columns(con.from_arrow(mixed.to_arrow()), "runs", mixed=True).pl()
    assert rows["relevance_level"].to_list() == [1, 2]
    assert rows["created_at_utc"].to_list() == [datetime(2026, 11, 2, 2, tzinfo=timezone.utc),
                                                 datetime(2026, 11, 9, 2, tzinfo=timezone.utc)]
    old_cases = pl.DataFrame({"run_id": ["old"], "case_id": ["a"], "n_gold": [2], "relevant_ranks": [[2]]})
    [case] = with_later_columns(con.from_arrow(old_cases.to_arrow()), "cases", mixed=False).pl().to_dicts()
    assert (case["graded_ranks"], case["ideal_gains"], case["question"], case["top_cards"]) == (
        [{"rank": 2, "grade": 1}], [1, 1], None, None)
    current = con.from_arrow(mixed.to_arrow()).select("run_id")  # a table with nothing later
    assert with_later_columns(current, "aggregates", mixed=True).columns == ["run_id"]
    same_schema = con.from_arrow(mixed.to_arrow())  # parts of one schema: read as they are
    assert with_later_columns(same_schema, "runs", mixed=False) is same_schema


def test_a_later_column_whose_sources_are_missing_too_reads_as_null():
    from retrieval_eval.flows.storage.duckdb_connection import connect
    from retrieval_eval.flows.warehouse.views import with_later_columns
    from retrieval_eval.transforms.run_summary import IDENTITY_COUNTS

    con = connect()
    bare = pl.DataFrame({"run_id": ["old-run"], "n_cases": [3]})  # no created_at to derive from
    [row] = with_later_columns(con.from_arrow(bare.to_arrow()), "runs", mixed=False).pl().to_dicts()
    assert row == {"run_id": "old-run", "n_cases": 3, "created_at_utc": None, "relevance_level": 1,
                   "kb_uri": None, "kb_digest": None, **dict.fromkeys(IDENTITY_COUNTS)}


def test_card_id_is_computed_by_every_view_whether_a_part_stores_it_or_not(tmp_path):
    """`retrieved` parts no longer store card_id (flows/warehouse/views.py DERIVED_COLUMNS); a part of an
    earlier version does. The views (`query`, the report) and the catalog compute it for both by
    SPEC 2.1: parent_id when present and non-empty, else the chunk's id."""
    import duckdb
    from retrieval_eval.flows.warehouse.catalog import _view_ddl
    from retrieval_eval.flows.storage.duckdb_connection import connect
    from retrieval_eval.flows.warehouse.views import with_derived_columns

    earlier = pl.DataFrame({"run_id": ["old"] * 2, "case_id": ["a"] * 2, "rank": [1, 2], "chunk_id": ["A::00", "B::00"],
                            "parent_id": ["A", None], "card_id": ["A", "B::00"], "score": [0.9, 0.8], "card_rank": [1, 2]})
    now = pl.DataFrame({"run_id": ["new"] * 2, "case_id": ["a"] * 2, "rank": [1, 2], "chunk_id": ["C::00", "D::00"],
                        "parent_id": ["", "D"], "score": [0.9, 0.8], "card_rank": [1, 2]})
    files = [str(tmp_path / "earlier.parquet"), str(tmp_path / "now.parquet")]
    earlier.write_parquet(files[0])
    now.write_parquet(files[1])
    expected = [("old", "A"), ("old", "B::00"), ("new", "C::00"), ("new", "D")]
    con = connect()
    view = with_derived_columns(con.read_parquet(files, union_by_name=True), "retrieved")
    assert view.columns[-1] == "card_id" and view.columns.count("card_id") == 1
    assert view.select("run_id", "card_id").fetchall() == expected
    catalog = duckdb.connect()
    catalog.execute("attach ':memory:' as catalog")
    catalog.execute(_view_ddl("retrieved", files, by_name=True))
    assert catalog.execute("select run_id, card_id from catalog.retrieved").fetchall() == expected
    assert with_derived_columns(view, "cases") is view  # a table with nothing derived
