-- kb_unknown_gold: one row per run in $ids whose effective gold holds ids that are not KB cards.
-- Reads: cases (gold, gold_source), kb_cards (id). Parameters: $ids. Grain: run_id.
-- Columns: run_id, n_ids (unknown gold ids), n_cases (cases holding one). Which ids they are
--          is asked only where a comparison needs them (flows/inputs/kb.py `unknown_gold`).
with gold_ids as (
    select run_id, case_id, gold_source as field, unnest(gold) as gold_id
    from cases
    where list_contains($ids, run_id)
),

unknown as (
    select gold_ids.*
    from gold_ids
    anti join kb_cards on kb_cards.id = gold_ids.gold_id
),

final as (
    select run_id, count(*) as n_ids, count(distinct case_id) as n_cases
    from unknown
    group by run_id
)

select * from final
