-- audit run_accounts: each run's `runs` row agrees with its other views: n_cases cases,
-- n_labelled × (number of ks) case_metrics rows, and as many retrieved rows as its cases say.
-- Reads: runs, cases, retrieved, case_metrics. Returns: audit, run_id, detail.
with counted as (
    select
        runs.run_id,
        runs.n_cases,
        runs.n_labelled * len(runs.ks) as expected_metrics,
        (select count(*) from cases where cases.run_id = runs.run_id) as n_case_rows,
        (select coalesce(sum(n_retrieved), 0) from cases where cases.run_id = runs.run_id) as expected_retrieved,
        (select count(*) from retrieved where retrieved.run_id = runs.run_id) as n_retrieved_rows,
        (select count(*) from case_metrics where case_metrics.run_id = runs.run_id) as n_metric_rows
    from runs
),

final as (
    select 'run_accounts' as audit, run_id,
        'runs says ' || n_cases || ' cases and ' || expected_metrics || ' case_metrics rows; found '
        || n_case_rows || ' and ' || n_metric_rows || ' (retrieved ' || n_retrieved_rows || ' of ' || expected_retrieved || ')'
        as detail
    from counted
    where n_cases <> n_case_rows or expected_metrics <> n_metric_rows or expected_retrieved <> n_retrieved_rows
)

select * from final
