-- case_metrics: one row per (labelled case, k) of one run (the `case_metrics` view).
-- Reads the run's `cases` rows: relevant_ranks holds the ascending ranks, among distinct
-- cards, at which gold cards were retrieved. Binary relevance; hit_ranks = relevant_ranks <= k.
--   hit_at_k             = 1 if any hit else 0          (trec_eval success_k, ranx hit_rate@k)
--   recall_at_k          = hits / n_gold                 (trec_eval recall_k; lower bound under disjunctive gold)
--   ndcg_at_k            = DCG / IDCG, DCG = sum 1/log2(r+1) over hit ranks,
--                          IDCG = sum_{i=1..min(n_gold,k)} 1/log2(i+1)   (trec_eval ndcg_cut_k)
--   precision_at_k       = hits / k, even when fewer than k cards came back (trec_eval P_k)
--   reciprocal_rank_at_k = 1 / first hit rank if <= k else 0 (trec_eval recip_rank cut at k)
--   first_relevant_rank  = first gold rank in the whole de-duplicated list, else null
-- Cases with empty gold have no rows (SPEC 2.4); empty retrieval scores 0 (SPEC 2.5).
-- k_beyond_depth marks a case that captured fewer than k distinct cards (SPEC 2.7).
-- Columns: run_id, case_id, locale, category, k, n_gold, hit_at_k, recall_at_k, ndcg_at_k,
--          precision_at_k, reciprocal_rank_at_k, first_relevant_rank, k_beyond_depth
with labelled as (
    select * from cases where n_gold > 0
),

cutoffs as (
    select unnest($ks) as k
),

per_cutoff as (
    select
        labelled.*,
        cutoffs.k,
        list_filter(labelled.relevant_ranks, lambda r: r <= cutoffs.k) as hit_ranks
    from labelled
    cross join cutoffs
),

final as (
    select
        run_id,
        case_id,
        locale,
        category,
        k,
        n_gold,
        (len(hit_ranks) > 0)::double as hit_at_k,
        (len(hit_ranks) / n_gold)::double as recall_at_k,
        (coalesce(list_sum(list_transform(hit_ranks, lambda r: 1 / log2(r + 1))), 0)
            / list_sum(list_transform(range(1, least(n_gold, k) + 1), lambda i: 1 / log2(i + 1))))::double
            as ndcg_at_k,
        (len(hit_ranks) / k)::double as precision_at_k,
        coalesce(1 / hit_ranks[1], 0)::double as reciprocal_rank_at_k,
        relevant_ranks[1] as first_relevant_rank,
        n_cards < k as k_beyond_depth
    from per_cutoff
)

select * from final
