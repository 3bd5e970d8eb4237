-- audit metric_bounds: every metric of case_metrics and every mean and interval of aggregates
-- lies in [0, 1], with ci_low <= mean <= ci_high and n >= 1.
-- Reads: case_metrics, aggregates. Returns: audit, run_id, detail.
with cases_out as (
    select run_id, case_id || ' k=' || k as what
    from case_metrics
    where not (
        hit_at_k between 0 and 1 and recall_at_k between 0 and 1 and ndcg_at_k between 0 and 1
        and precision_at_k between 0 and 1 and reciprocal_rank_at_k between 0 and 1
    )
),

aggregates_out as (
    select run_id, k || ' ' || slice || '=' || slice_value || ' ' || metric as what
    from aggregates
    where not (mean between 0 and 1 and ci_low between 0 and mean + 1e-12 and ci_high between mean - 1e-12 and 1
               and n >= 1)
),

final as (
    select 'metric_bounds' as audit, run_id, 'case_metrics ' || what || ' out of [0, 1]' as detail from cases_out
    union all
    select 'metric_bounds', run_id, 'aggregates ' || what || ' out of bounds' from aggregates_out
)

select * from final
