-- report_card_texts: the text of each card identified by its content (SPEC 15) among the cards
-- $cards that the runs $ids ranked: such a card's chunks are named by their text (`chunk_id`,
-- flows/sources/format_sources.py), its card id `text:` + a digest of it. The case explorer
-- shows the text beside the id.
-- Reads: retrieved. Parameters: $ids, $cards. Grain: card_id. Columns: card_id, text (the
-- text of its first chunk, by chunk text: every chunk of such a card has the same text once
-- normalised).
with named as (
    select card_id, chunk_id
    from retrieved
    where list_contains($ids, run_id) and list_contains($cards, card_id)
),

final as (
    select card_id, min(chunk_id) as text
    from named
    group by card_id
)

select * from final
order by card_id
