"""`retrieval_eval.evaluate` (SPEC 12): the CLI's figures in memory. On the committed sample
it equals what `retrieval-eval run` commits to the warehouse, for every run; it takes a path
(.jsonl or .gz), a Polars or pandas DataFrame and an iterable of dicts alike; bad records and
bad arguments are named."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pandas as pd
import polars as pl
import pytest
import retrieval_eval
from builders import SAMPLE_RUN_IDS, SAMPLE_RUNS, case, chunk, cli, reader
from retrieval_eval.transforms.errors import InputError, RejectedRecords

KS = (1, 2, 3, 5)
AGGREGATE_KEYS = ["k", "slice", "slice_value", "metric"]


@pytest.fixture(scope="module")
def sample_warehouse(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sample")
    result = cli("run", str(SAMPLE_RUNS), "--ks", ",".join(map(str, KS)), "--warehouse", str(root / "warehouse"),
                 "--report-dir", str(root / "report"), "--quiet")
    assert result.returncode == 0, result.stderr
    return root / "warehouse"


def cases_of(run_id: str) -> list[dict]:
    with open(SAMPLE_RUNS / run_id / "cases.jsonl", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def assert_same_figures(got, expected_metrics: pl.DataFrame, expected_aggregates: pl.DataFrame) -> None:
    """Per-case metrics equal to the last bit; aggregates to 1e-12 (their sums may add up in
    another order)."""
    metrics = got.case_metrics.drop("run_id").sort("case_id", "k")
    assert metrics.columns == expected_metrics.drop("run_id").columns
    assert metrics.equals(expected_metrics.drop("run_id").sort("case_id", "k"))
    aggregates = got.aggregates.drop("run_id").sort(AGGREGATE_KEYS)
    expected = expected_aggregates.drop("run_id").sort(AGGREGATE_KEYS)
    assert aggregates.columns == expected.columns and aggregates.height == expected.height
    assert aggregates.select(AGGREGATE_KEYS + ["n"]).equals(expected.select(AGGREGATE_KEYS + ["n"]))
    for column in ("mean", "ci_low", "ci_high"):
        assert (aggregates[column] - expected[column]).abs().max() <= 1e-12, column


@pytest.mark.parametrize("run_id", SAMPLE_RUN_IDS)
def test_equals_the_warehouse_figures_of_the_command(sample_warehouse, run_id):
    with reader(sample_warehouse) as con:
        metrics = con.table("case_metrics").pl().filter(pl.col("run_id") == run_id)
        aggregates = con.table("aggregates").pl().filter(pl.col("run_id") == run_id)
    got = retrieval_eval.evaluate(SAMPLE_RUNS / run_id / "cases.jsonl", k=4, ks=KS)
    assert metrics.height == 240 * 5  # 240 labelled cases at k = 1, 2, 3, 4, 5
    assert_same_figures(got, metrics, aggregates)


def input_kinds(run_id: str, tmp_path: Path) -> dict:
    records = cases_of(run_id)
    gz = tmp_path / "cases.jsonl.gz"
    gz.write_bytes(gzip.compress((SAMPLE_RUNS / run_id / "cases.jsonl").read_bytes()))
    return {
        "path as text": str(SAMPLE_RUNS / run_id / "cases.jsonl"),
        "gzip path": gz,
        "polars": pl.DataFrame(records),
        "pandas": pd.DataFrame(records),
        "list of dicts": records,
        "generator": (record for record in records),
    }


@pytest.mark.parametrize("kind", ["path as text", "gzip path", "polars", "pandas", "list of dicts", "generator"])
def test_every_input_kind_gives_the_same_figures(tmp_path, kind):
    run_id = SAMPLE_RUN_IDS[-1]
    expected = retrieval_eval.evaluate(SAMPLE_RUNS / run_id / "cases.jsonl", k=4, ks=KS)
    got = retrieval_eval.evaluate(input_kinds(run_id, tmp_path)[kind], k=4, ks=KS)
    assert_same_figures(got, expected.case_metrics, expected.aggregates)


GRADED = [
    case("a", [chunk("B"), chunk("X"), chunk("A")], relevance={"A": 3, "B": 1}),
    case("b", [chunk("C", score=0.5)], relevance={"C": 2, "D": 0}, question="which one?"),
    case("c", [chunk("Q::0", "Q")], ["Q"]),
]


@pytest.mark.parametrize("make", [list, pl.DataFrame, pd.DataFrame], ids=["dicts", "polars", "pandas"])
def test_graded_cases_of_every_kind(make):
    # A Polars struct of `relevance` has a field for every card of the column, null in a row
    # that does not grade it: a null is no grade. nDCG@3 of "a": 2.5 / (3 + 1/log2(3)).
    got = retrieval_eval.evaluate(make(GRADED), k=3)
    rows = {row["case_id"]: row for row in got.case_metrics.iter_rows(named=True)}
    assert rows["a"]["ndcg_at_k"] == pytest.approx(2.5 / (3 + 1 / math.log2(3)), abs=1e-12)
    assert {c: rows[c]["n_gold"] for c in rows} == {"a": 2, "b": 1, "c": 1}
    assert got.aggregates.filter((pl.col("slice") == "all") & (pl.col("metric") == "hit_at_k"))["n"].to_list() == [3]


def test_pandas_missing_cells_are_absent_fields():
    frame = pd.DataFrame([
        {"case_id": "a", "locale": "en", "category": "g", "must_cite_one_of": ["X"], "retrieved_context": [{"id": "X"}]},
        {"case_id": "b", "locale": "en", "category": "g", "retrieved_context": [{"id": "Y"}]},  # NaN gold: unlabelled
    ])
    assert math.isnan(frame.loc[1, "must_cite_one_of"])
    got = retrieval_eval.evaluate(frame, k=1)
    assert got.case_metrics["case_id"].to_list() == ["a"] and got.cases["n_gold"].to_list() == [1, 0]


BAD = [
    case("ok", [chunk("X")], ["X"]),
    {"case_id": "no-category", "locale": "en"},
    case("nan-score", [chunk("X", score=float("nan"))], ["X"]),
    case("ok", [chunk("Y")], ["Y"]),
]


@pytest.mark.parametrize("make, name", [(list, "cases"), (pl.DataFrame, "polars.DataFrame"),
                                        (pd.DataFrame, "pandas.DataFrame")], ids=["dicts", "polars", "pandas"])
def test_bad_records_raise_naming_their_record(make, name):
    with pytest.raises(RejectedRecords) as refused:
        retrieval_eval.evaluate(make(BAD), k=1)
    assert [r.describe() for r in refused.value.rejects] == [
        f"{name}:2: missing required field category",
        f"{name}:3: not valid JSON (NaN is not a JSON number)",
        f"{name}:4: case_id 'ok' repeats line 1",
    ]
    assert "(use allow_rejects=True to load the valid records)" in str(refused.value)  # the API's way, not the flag
    from retrieval_eval.flows.commands.api import in_memory_figures as evaluate

    kept = evaluate(make(BAD), k=1, allow_rejects=True)
    assert kept.case_metrics["case_id"].to_list() == ["ok"] and len(kept.rejects) == 3


def test_bad_records_of_a_file_are_named_by_file_and_line(tmp_path):
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps(case("a", [], ["X"])) + "\n\n" + '{"case_id": "b", "locale": 5}\n')
    with pytest.raises(RejectedRecords, match=f"{path}:3: field locale must be a string, got number"):
        retrieval_eval.evaluate(path, k=1)


@pytest.mark.parametrize("cases, options, message", [
    ([case("a", [], ["X"])], {"k": 0}, "k must be an integer in [1, 2147483647], got 0"),
    ([case("a", [], ["X"])], {"k": True}, "k must be an integer in [1, 2147483647], got True"),
    ([case("a", [], ["X"])], {"k": 2.5}, "k must be an integer in [1, 2147483647], got 2.5"),
    ([case("a", [], ["X"])], {"k": 1, "ks": (1, 0)}, "ks must be an integer in [1, 2147483647], got 0"),
    ([case("a", [], ["X"])], {"k": 1, "relevance_level": 0}, "relevance_level must be an integer"),
    ([], {"k": 1}, "cases: holds no cases"),
    (pl.DataFrame(), {"k": 1}, "polars.DataFrame: holds no cases"),
    (case("a", [], ["X"]), {"k": 1}, "give a cases.jsonl path, a Polars or pandas DataFrame, or an iterable"),
    (42, {"k": 1}, "give a cases.jsonl path"),
    ("no/such/cases.jsonl", {"k": 1}, "no/such/cases.jsonl: no such cases file"),
    ([{"case_id": "a", "locale": "en", "category": "g", "x": object()}], {"k": 1}, "cases[0]: not a JSON object of a case"),
], ids=["k 0", "k a boolean", "k a fraction", "ks 0", "level 0", "no cases", "empty frame", "a dict", "a number",
        "missing path", "not JSON"])
def test_bad_arguments_are_input_errors(cases, options, message):
    with pytest.raises(InputError) as refused:
        retrieval_eval.evaluate(cases, **options)
    assert message in str(refused.value)
