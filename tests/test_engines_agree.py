"""Polars (aggregates) and DuckDB SQL (an ad-hoc query over case_metrics) must agree:
users will check the `aggregates` view against their own `avg()`."""

from __future__ import annotations

import polars as pl
import pytest
from builders import evaluate, job_options, reader
from retrieval_eval.flows.warehouse import Warehouse
from retrieval_eval.transforms.aggregates import (
    aggregates,
    merge_partials,
    slice_partials,
)

AD_HOC_SQL = """
    select run_id, k, 'locale' as slice, locale as slice_value, avg(ndcg_at_k) as mean, count(*) as n
    from case_metrics group by all
    union all
    select run_id, k, 'all', 'all', avg(ndcg_at_k), count(*) from case_metrics group by all
"""


@pytest.fixture(scope="module")
def sample_warehouse(tmp_path_factory):
    from builders import SAMPLE_RUNS

    root = tmp_path_factory.mktemp("wh")
    evaluate(job_options(SAMPLE_RUNS, root, ks=(1, 3, 10)))
    return Warehouse(root)


def test_polars_aggregates_agree_with_duckdb_sql(sample_warehouse):
    with reader(sample_warehouse) as con:
        ours = con.table("aggregates").pl().filter(
            (pl.col("metric") == "ndcg_at_k") & pl.col("slice").is_in(["all", "locale"])
        )
        duck = con.sql(AD_HOC_SQL).pl()
    joined = ours.join(duck, on=["run_id", "k", "slice", "slice_value"], suffix="_sql")
    assert joined.height == duck.height == ours.height > 0
    assert (joined["n"] == joined["n_sql"]).all()
    assert (joined["mean"] - joined["mean_sql"]).abs().max() < 1e-12


def test_partitioned_partial_sums_equal_the_whole(sample_warehouse):
    with reader(sample_warehouse) as con:
        metrics = con.table("case_metrics").pl()
    whole = aggregates(slice_partials(metrics))
    thirds = metrics.with_columns((pl.int_range(pl.len()) % 3).alias("part")).partition_by("part")
    merged = aggregates(merge_partials([slice_partials(third.drop("part")) for third in thirds]))
    keys = ["run_id", "k", "slice", "slice_value", "metric"]
    joined = whole.join(merged, on=keys, suffix="_merged")
    assert joined.height == whole.height == merged.height
    assert (joined["n"] == joined["n_merged"]).all()
    for column in ("mean", "ci_low", "ci_high"):  # sums in another order: equal to rounding
        assert (joined[column] - joined[f"{column}_merged"]).abs().max() < 1e-12
