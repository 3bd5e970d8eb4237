-- staged_case_problems: one row — what breaks a record rule among a run's staged cases.
-- Columns: n_records, n_bad_records, n_repeated_case_ids
with staged as (
    select case_id, breaks_rule from read_parquet($files)
),

final as (
    select
        count(*) as n_records,
        count(*) filter (where breaks_rule) as n_bad_records,
        count(*) - count(distinct case_id) as n_repeated_case_ids
    from staged
)

select * from final
