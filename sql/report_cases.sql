-- report_cases: one row per labelled case of each run in $ids at that run's headline k, with
-- what the report shows of it: its metrics, gold cards, question, how much it retrieved and
-- the distinct cards it ranked down to the headline k or to its first relevant card,
-- whichever is deeper (`cards`, cut from the cases table's top_cards, at most 50: the case
-- explorer's evidence of a hit or a miss; cases keep only those now, runs evaluated earlier
-- kept 50); n_cards counts every distinct card it retrieved.
-- Reads: case_metrics, cases, runs. Parameters: $ids. Grain: (run_id, case_id).
-- Columns: every column of `case_metrics` but gains_at_k (nothing in the report reads it: a
-- nested list per row, a fifth of this read at 100k cases), gold, question, n_retrieved, cards, n_cards
with at_headline as (
    select case_metrics.* exclude (gains_at_k)
    from case_metrics
    join runs using (run_id)
    where list_contains($ids, run_id) and case_metrics.k = runs.headline_k
),

final as (
    select
        at_headline.*,
        cases.gold,
        cases.question,
        cases.n_retrieved,
        cases.top_cards[1:greatest(at_headline.k, coalesce(at_headline.first_relevant_rank, 0))] as cards,
        cases.n_cards
    from at_headline
    join cases using (run_id, case_id)
)

select * from final
