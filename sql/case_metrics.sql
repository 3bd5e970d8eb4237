-- case_metrics: one row per (labelled case, k) of one run (the `case_metrics` view).
-- Reads `cases` (one row per case, transforms/rankings.py): among distinct cards of the whole
-- captured list, relevant_ranks = ascending ranks of the relevant cards, graded_ranks =
-- {rank, grade} of the retrieved cards graded above 0, ideal_gains = every grade above 0 of
-- the case, descending. hit_ranks = relevant_ranks <= k; ungraded gold has grade 1.
--   hit_at_k             = 1 if any hit else 0          (trec_eval success_k, ranx hit_rate@k)
--   recall_at_k          = hits / n_gold                 (trec_eval recall_k; lower bound under disjunctive gold)
--   ndcg_at_k            = DCG / IDCG, DCG = sum grade/log2(r+1) over graded ranks r <= k,
--                          IDCG = sum_{i=1..k} ideal_gains[i]/log2(i+1)   (trec_eval ndcg_cut_k)
--   precision_at_k       = hits / k, even when fewer than k cards came back (trec_eval P_k)
--   reciprocal_rank_at_k = 1 / first hit rank if <= k else 0 (trec_eval recip_rank cut at k)
--   first_relevant_rank  = first relevant rank in the whole de-duplicated list, else null
-- Cases with no relevant card have no rows (SPEC 2.4); empty retrieval scores 0 (SPEC 2.5).
-- k_beyond_depth marks a case that captured fewer than k distinct cards (SPEC 2.7);
-- gains_at_k lists {rank, grade} of the graded cards among the first k.
-- Parameters: $ks (the cutoffs). Grain: (run_id, case_id, k).
-- Columns: run_id, case_id, locale, category, k, n_gold, hit_at_k, recall_at_k, ndcg_at_k,
--          precision_at_k, reciprocal_rank_at_k, first_relevant_rank, k_beyond_depth, gains_at_k
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
        list_filter(labelled.relevant_ranks, lambda r: r <= cutoffs.k) as hit_ranks,
        list_filter(labelled.graded_ranks, lambda g: g.rank <= cutoffs.k) as gains_at_k
    from labelled
    cross join cutoffs
),

gains as (
    select
        *,
        coalesce(list_sum(list_transform(gains_at_k, lambda g: g.grade / log2(g.rank + 1))), 0) as dcg,
        list_sum(list_transform(list_slice(ideal_gains, 1, k), lambda g, i: g / log2(i + 1))) as idcg
    from per_cutoff
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
        (dcg / idcg)::double as ndcg_at_k,
        (len(hit_ranks) / k)::double as precision_at_k,
        coalesce(1 / hit_ranks[1], 0)::double as reciprocal_rank_at_k,
        relevant_ranks[1] as first_relevant_rank,
        n_cards < k as k_beyond_depth,
        gains_at_k
    from gains
)

select * from final
