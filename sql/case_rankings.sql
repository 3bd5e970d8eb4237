-- case_rankings: one row per case of one run, with its card-level ranking and gold.
-- SPEC 2.1 card identity: parent_id when present and non-empty, else id.
-- SPEC 2.2/2.3: list order is the rank; card ids are de-duplicated keeping the first
--   occurrence, so ranked_cards[i] is the card at rank i.
-- SPEC 2.4: gold is relevant_ids when the field is non-null, else must_cite_one_of,
--   de-duplicated (sorted, since gold is a set).
-- Columns: case_id, locale, category, gold_source, gold, chunk_ids, parent_ids, chunk_cards,
--          scores, ranked_cards, relevant_ranks (ascending ranks of gold cards in ranked_cards)
with typed as (
    select
        case_id ->> '$' as case_id,
        locale ->> '$' as locale,
        category ->> '$' as category,
        case when relevant_ids is not null then 'relevant_ids' else 'must_cite_one_of' end as gold_source,
        list_sort(list_distinct(coalesce(relevant_ids, must_cite_one_of) ->> '$[*]')) as gold,
        list_transform(coalesce(retrieved_context, []), lambda x: x.id ->> '$') as chunk_ids,
        list_transform(coalesce(retrieved_context, []), lambda x: x.parent_id ->> '$') as parent_ids,
        list_transform(
            coalesce(retrieved_context, []),
            lambda x: coalesce(nullif(x.parent_id ->> '$', ''), x.id ->> '$')
        ) as chunk_cards,
        list_transform(coalesce(retrieved_context, []), lambda x: x.score::double) as scores
    from raw_cases
),

ranked as (
    select
        *,
        list_filter(chunk_cards, lambda c, i: list_position(chunk_cards, c) = i) as ranked_cards
    from typed
),

final as (
    select
        *,
        list_sort(list_filter(
            list_transform(coalesce(gold, []), lambda g: list_position(ranked_cards, g)),
            lambda r: r is not null
        )) as relevant_ranks
    from ranked
)

select * from final
