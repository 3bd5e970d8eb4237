-- export_case_metrics: the case_metrics rows of run $run_id (`retrieval-eval export`), at
-- cutoff $k, or at every cutoff of the run when $k is null; the columns of the view that
-- are not lists.
-- Reads: case_metrics. Parameters: $run_id, $k. Grain: (case_id, k).
-- Columns: run_id, case_id, locale, category, k, n_gold, hit_at_k, recall_at_k, ndcg_at_k,
--          precision_at_k, reciprocal_rank_at_k, first_relevant_rank, k_beyond_depth
with chosen as (
    select *
    from case_metrics
    where run_id = $run_id and ($k is null or k = $k)
),

final as (
    select
        run_id,
        case_id,
        locale,
        category,
        k,
        n_gold,
        hit_at_k,
        recall_at_k,
        ndcg_at_k,
        precision_at_k,
        reciprocal_rank_at_k,
        first_relevant_rank,
        k_beyond_depth
    from chosen
)

select * from final order by case_id, k
