"""The floor: bare DuckDB reads the file and computes mean hit@10, nothing else.

    python benchmarks/peers/duckdb_floor.py CASES_JSONL

No validation, no warehouse, no report: one read_json of the three fields hit@10 needs,
then per case (one row each) card = parent_id else id, de-duplicated keeping the first
occurrence, hit@10 = any gold card among the first 10 distinct cards; unlabelled cases
left out; one mean. A tool that reads the same JSON with DuckDB cannot be much faster.

(An unnest + window + group-by formulation of the same per-case step measured ~40%
slower on 10k cases, so the list-function form is used: the lower floor.)
"""

from __future__ import annotations

import sys

import duckdb

K = 10
QUERY = """
with labelled as (
    select
        must_cite_one_of as gold,
        list_transform(retrieved_context, lambda x: coalesce(x.parent_id, x.id)) as chunk_cards
    from read_json(
        $path,
        format = 'newline_delimited',
        columns = {
            case_id: 'VARCHAR',
            must_cite_one_of: 'VARCHAR[]',
            retrieved_context: 'STRUCT(id VARCHAR, parent_id VARCHAR)[]'
        }
    )
    where len(must_cite_one_of) > 0
),
per_case as (
    select
        gold,
        list_filter(chunk_cards, lambda c, i: list_position(chunk_cards, c) = i) as cards
    from labelled
)
select
    avg(case when list_has_any(cards[1:$k], gold) then 1.0 else 0.0 end) as hit_at_k,
    count(*) as cases
from per_case
"""


def main(path: str) -> None:
    con = duckdb.connect()
    hit, n = con.execute(QUERY, {"path": path, "k": K}).fetchone()
    print(f"hit@10 {hit:.6f}")
    print(f"cases {n}")


if __name__ == "__main__":
    main(sys.argv[1])
