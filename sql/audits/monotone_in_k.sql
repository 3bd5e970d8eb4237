-- audit monotone_in_k: a case's hit and recall never fall as k grows.
-- Reads: case_metrics. Returns: audit, run_id, detail.
with steps as (
    select
        run_id,
        case_id,
        k,
        hit_at_k - lag(hit_at_k) over by_k as hit_step,
        recall_at_k - lag(recall_at_k) over by_k as recall_step
    from case_metrics
    window by_k as (partition by run_id, case_id order by k)
),

final as (
    select 'monotone_in_k' as audit, run_id, case_id || ' falls at k=' || k as detail
    from steps
    where hit_step < -1e-12 or recall_step < -1e-12
)

select * from final
