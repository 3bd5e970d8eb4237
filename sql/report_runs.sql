-- report_runs: one row per run of the warehouse, oldest first (the report's runs table and trend).
-- Runs are ordered by the instant of created_at (offsets honoured), then by run_id.
-- Reads: runs. Grain: run_id. Columns: every column of `runs`.
with final as (
    select * from runs
)

select * from final
order by created_at_utc, run_id
