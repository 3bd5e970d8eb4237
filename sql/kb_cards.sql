-- kb_cards: one row per line of the knowledge base (cards.jsonl).
-- Columns: id, title
select *
from read_json(
    $path,
    format = 'newline_delimited',
    columns = {id: 'VARCHAR', title: 'VARCHAR'}
)
