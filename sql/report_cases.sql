-- report_cases: one row per labelled case of each run in $ids at one cutoff, $k (the newest
-- run's headline k: what changed and the case explorer compare both runs at the k they name),
-- with what the report shows of it: its metrics, gold cards, question, how much it retrieved
-- and the distinct cards it ranked down to $k or to its first relevant card, whichever is
-- deeper (`cards`, cut from the cases table's top_cards, at most 50: the case explorer's
-- evidence of a hit or a miss; cases keep only those now, runs evaluated earlier kept 50);
-- n_cards counts every distinct card it retrieved.
-- A run evaluated without $k among its cutoffs has no stored rows at $k: the caller computes
-- them from its cases with sql/case_metrics.sql and passes them as computed_case_metrics
-- (empty when every run has $k).
-- Reads: case_metrics, computed_case_metrics, cases. Parameters: $ids, $k. Grain: (run_id, case_id).
-- Columns: every column of `case_metrics` but gains_at_k (nothing in the report reads it: a
-- nested list per row, a fifth of this read at 100k cases), gold, gold_source, question,
-- n_retrieved, cards, card_scores (their retrieval scores), n_cards, graded_ranks and
-- ideal_gains (the grades the explorer shows beside a graded case's cards)
with at_k as (
    select * exclude (gains_at_k)
    from case_metrics
    where list_contains($ids, run_id) and k = $k
    union all by name
    select * exclude (gains_at_k)
    from computed_case_metrics
    where list_contains($ids, run_id) and k = $k
),

final as (
    select
        at_k.*,
        cases.gold,
        cases.gold_source,
        cases.question,
        cases.n_retrieved,
        cases.top_cards[1:greatest(at_k.k, coalesce(at_k.first_relevant_rank, 0))] as cards,
        cases.top_scores[1:greatest(at_k.k, coalesce(at_k.first_relevant_rank, 0))] as card_scores,
        cases.n_cards,
        cases.graded_ranks,
        cases.ideal_gains
    from at_k
    join cases using (run_id, case_id)
)

select * from final
