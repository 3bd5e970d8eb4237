"""Polars (aggregates) and DuckDB SQL (an ad-hoc query over case_metrics) must agree:
users will check the `aggregates` view against their own `avg()`."""

from __future__ import annotations

import polars as pl
import pytest
from builders import evaluate, job_options, reader
from retrieval_eval.flows.warehouse.warehouse import Warehouse
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


@pytest.mark.parametrize("seed", range(5))
def test_any_partitioning_in_any_order_gives_the_same_bits(sample_warehouse, seed):
    # The sums are of fixed-point integers (transforms/aggregates.py FIXED_POINT): not equal to
    # rounding, equal. (Float sums differed in the last bit between two runs of one input.)
    with reader(sample_warehouse) as con:
        metrics = con.table("case_metrics").pl()
    whole = aggregates(slice_partials(metrics))
    shuffled = metrics.sample(fraction=1.0, shuffle=True, seed=seed)
    parts = shuffled.with_columns((pl.int_range(pl.len()) % (seed + 2)).alias("part")).partition_by("part")
    merged = aggregates(merge_partials([slice_partials(part.drop("part")) for part in reversed(parts)]))
    assert whole.height > 0
    assert whole.equals(merged)


def test_the_fixed_point_sums_stay_within_a_rounding_of_the_float_mean(sample_warehouse):
    with reader(sample_warehouse) as con:
        metrics = con.table("case_metrics").pl()
    ours = aggregates(slice_partials(metrics)).filter(pl.col("slice") == "all")
    direct = metrics.group_by("run_id", "k").agg(pl.col("ndcg_at_k").mean().alias("direct"))
    joined = ours.filter(pl.col("metric") == "ndcg_at_k").join(direct, on=["run_id", "k"])
    assert joined.height > 0 and (joined["mean"] - joined["direct"]).abs().max() < 1e-14
