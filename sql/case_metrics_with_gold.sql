-- case_metrics_with_gold: one row per labelled case of the runs in view at cutoff $k, with
-- the case's gold card ids (the gate and the baseline snapshot read it).
-- Reads: case_metrics, cases. Parameters: $k. Grain: (run_id, case_id).
-- Columns: every column of `case_metrics`, gold, n_retrieved
with at_k as (
    select * from case_metrics where k = $k
),

final as (
    select at_k.*, cases.gold, cases.n_retrieved
    from at_k
    join cases using (run_id, case_id)
)

select * from final
