-- gold_not_in_kb: one row per (run, case, gold field, id) whose gold id is not a KB card.
-- Reads: kb_cards (id), gold_ids (run_id, case_id, field, gold_id), tables or CTEs. Unordered.
-- Grain: (run_id, case_id, field, gold_id).
-- Columns: run_id, case_id, field, gold_id
with final as (
    select gold_ids.run_id, gold_ids.case_id, gold_ids.field, gold_ids.gold_id
    from gold_ids
    anti join kb_cards on kb_cards.id = gold_ids.gold_id
)

select * from final
