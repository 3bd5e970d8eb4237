-- kb_cards: one row per card of the knowledge base (cards.jsonl); its other fields are ignored.
-- Parameters: $path. Grain: id (flows/kb.py checks that it is unique and never empty).
-- Columns: id, title
with final as (
    select *
    from read_json(
        $path,
        format = 'newline_delimited',
        columns = {id: 'VARCHAR', title: 'VARCHAR'}
    )
)

select * from final
