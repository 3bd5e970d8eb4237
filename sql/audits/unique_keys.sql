-- audit unique_keys: every view holds one row per key of its grain.
-- Reads: runs, cases, retrieved, case_metrics, aggregates. Returns one row per repeated key:
-- audit, run_id, detail (none when the audit passes).
with repeats as (
    select 'runs' as grain, run_id, run_id as key, count(*) as n from runs group by run_id having n > 1
    union all
    select 'cases', run_id, case_id, count(*) from cases group by run_id, case_id having count(*) > 1
    union all
    select 'retrieved', run_id, case_id || ' rank ' || rank, count(*) from retrieved
    group by run_id, case_id, rank having count(*) > 1
    union all
    select 'case_metrics', run_id, case_id || ' k=' || k, count(*) from case_metrics
    group by run_id, case_id, k having count(*) > 1
    union all
    select 'aggregates', run_id, k || ' ' || slice || '=' || slice_value || ' ' || metric, count(*) from aggregates
    group by run_id, k, slice, slice_value, metric having count(*) > 1
),

final as (
    select 'unique_keys' as audit, run_id, grain || ' ' || key || ' appears ' || n || ' times' as detail
    from repeats
)

select * from final
