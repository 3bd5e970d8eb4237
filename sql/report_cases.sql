-- report_cases: one row per labelled case of each run in $ids at that run's headline k, with
-- what the report shows of it: its metrics, gold cards, question, how much it retrieved and
-- its distinct cards in rank order (the case explorer, the flips and their reasons).
-- Reads: case_metrics, cases, retrieved, runs. Parameters: $ids. Grain: (run_id, case_id).
-- Columns: every column of `case_metrics`, gold, question, n_retrieved, cards
with at_headline as (
    select case_metrics.*
    from case_metrics
    join runs using (run_id)
    where list_contains($ids, run_id) and case_metrics.k = runs.headline_k
),

ranked as (
    select run_id, case_id, list(card_id order by card_rank) as cards
    from retrieved
    where list_contains($ids, run_id) and card_rank is not null
    group by run_id, case_id
),

final as (
    select
        at_headline.*,
        cases.gold,
        cases.question,
        cases.n_retrieved,
        coalesce(ranked.cards, []::varchar[]) as cards
    from at_headline
    join cases using (run_id, case_id)
    left join ranked using (run_id, case_id)
)

select * from final
