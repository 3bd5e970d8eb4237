-- report_aggregates: what the report shows of each run's aggregates: every slice at the run's
-- headline k, and slice `all` at every k (the sweep). Reads: aggregates, runs.
-- Grain: (run_id, k, slice, slice_value, metric). Columns: every column of `aggregates`.
with final as (
    select aggregates.*
    from aggregates
    join runs using (run_id)
    where aggregates.k = runs.headline_k or aggregates.slice = 'all'
)

select * from final
