-- cases: one row per valid case of one run (the `cases` view of the warehouse).
-- n_gold counts de-duplicated gold cards (0 = unlabelled, scored nowhere);
-- n_retrieved counts retrieved items; n_cards counts distinct cards among them
-- (the depth at which k is measured).
-- Columns: run_id, case_id, locale, category, n_gold, n_retrieved, n_cards,
--          gold_source, gold, relevant_ranks
with final as (
    select
        $run_id as run_id,
        case_id,
        locale,
        category,
        coalesce(len(gold), 0) as n_gold,
        len(chunk_ids) as n_retrieved,
        len(ranked_cards) as n_cards,
        gold_source,
        coalesce(gold, []) as gold,
        relevant_ranks
    from case_rankings
)

select * from final
