-- headline_case_metrics: one row per labelled case of each run in $ids, at that run's
-- headline k (the report's diagnostics read no other k: a sweep does not grow the report).
-- Reads: case_metrics, runs. Parameters: $ids (run ids). Grain: (run_id, case_id).
-- Columns: every column of `case_metrics`.
with final as (
    select case_metrics.*
    from case_metrics
    join runs using (run_id)
    where list_contains($ids, run_id) and case_metrics.k = runs.headline_k
)

select * from final
