-- audit metric_order: per case and k, hit >= recall and hit >= RR (a case without a hit has
-- neither); hit >= nDCG as well at relevance level 1 (at a higher level a card graded below
-- it adds gain without being a hit, as in trec_eval); hit is exactly "first_relevant_rank <= k".
-- Reads: case_metrics, runs. Returns: audit, run_id, detail.
with broken as (
    select run_id, case_id, k
    from case_metrics
    join runs using (run_id)
    where hit_at_k + 1e-12 < recall_at_k
       or (runs.relevance_level <= 1 and hit_at_k + 1e-12 < ndcg_at_k)
       or hit_at_k + 1e-12 < reciprocal_rank_at_k
       or hit_at_k <> (coalesce(first_relevant_rank <= k, false))::double
),

final as (
    select 'metric_order' as audit, run_id, case_id || ' k=' || k || ': hit below another metric or off its rank' as detail
    from broken
)

select * from final
