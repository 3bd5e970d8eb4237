-- retrieved: one row per retrieved item of one run (the `retrieved` view).
-- rank is the 1-based list position (SPEC 2.2); card_id follows SPEC 2.1;
-- card_rank is the item's rank among distinct cards when it is the first item of its
-- card, and null for a later sibling chunk of a card already seen (SPEC 2.3).
-- Columns: run_id, case_id, rank, chunk_id, parent_id, card_id, score, card_rank
with items as (
    select
        case_id,
        ranked_cards,
        chunk_cards,
        unnest(range(1, len(chunk_ids) + 1)) as rank,
        unnest(chunk_ids) as chunk_id,
        unnest(parent_ids) as parent_id,
        unnest(chunk_cards) as card_id,
        unnest(scores) as score
    from case_rankings
),

final as (
    select
        $run_id as run_id,
        case_id,
        rank,
        chunk_id,
        parent_id,
        card_id,
        score,
        case
            when list_position(chunk_cards, card_id) = rank then list_position(ranked_cards, card_id)
        end as card_rank
    from items
)

select * from final
