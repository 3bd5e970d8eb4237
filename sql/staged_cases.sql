-- staged_cases: one row per record of one run's cases.jsonl (gzip read transparently),
-- typed, with a partition number from a stable hash of case_id and a flag for records
-- that break a record rule.
-- Only the fields the metrics need are read: chunk text and answers are never parsed.
-- Values are read as JSON so that breaks_rule can see the type that was written;
-- transforms/records.py states the rules and names each failure by line — this model
-- only detects, and must flag at least every record those rules reject.
-- SPEC 2.4: gold is relevant_ids when non-null, else must_cite_one_of, de-duplicated
-- (sorted: gold is a set).
-- The retrieved items come as parallel lists in rank order (cheaper to hand to Polars
-- than a list of structs).
-- Columns: case_id, locale, category, gold_source, gold, chunk_ids, parent_ids, scores,
--          breaks_rule, partition
with raw as (
    select *
    from read_json(
        $path,
        format = 'newline_delimited',
        compression = 'auto_detect',
        maximum_object_size = $max_object_size,
        columns = {
            case_id: 'JSON',
            locale: 'JSON',
            category: 'JSON',
            must_cite_one_of: 'JSON',
            relevant_ids: 'JSON',
            retrieved_context: 'STRUCT(id JSON, parent_id JSON, score JSON)[]'
        }
    )
),

checked as (
    select
        *,
        json_type(case_id) is distinct from 'VARCHAR' or case_id ->> '$' = ''
            or json_type(locale) is distinct from 'VARCHAR' or locale ->> '$' = ''
            or json_type(category) is distinct from 'VARCHAR' or category ->> '$' = ''
            as breaks_required,
        (must_cite_one_of is not null and (
            json_type(must_cite_one_of) <> 'ARRAY'
            or len(list_filter(
                json_extract(must_cite_one_of, '$[*]'),
                lambda g: json_type(g) <> 'VARCHAR' or g ->> '$' = ''
            )) > 0
        ))
        or (relevant_ids is not null and (
            json_type(relevant_ids) <> 'ARRAY'
            or len(list_filter(
                json_extract(relevant_ids, '$[*]'),
                lambda g: json_type(g) <> 'VARCHAR' or g ->> '$' = ''
            )) > 0
        )) as breaks_gold,
        -- A JSON value's text shows its type by its first character: '"' a string, '-' or a
        -- digit a number. Cheaper than json_type() on every retrieved item; non-finite
        -- numbers (1e999) are caught after the cast, in `final`.
        len(list_filter(
            retrieved_context,
            lambda x: x.id is null
                or not starts_with(x.id::varchar, '"')
                or x.id::varchar = '""'
                or (x.parent_id is not null and not starts_with(x.parent_id::varchar, '"'))
                or (x.score is not null and not list_contains(
                    ['-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'], left(x.score::varchar, 1)
                ))
        )) > 0 as breaks_item_types
    from raw
),

typed as (
    select
        case_id ->> '$' as case_id,
        locale ->> '$' as locale,
        category ->> '$' as category,
        case when relevant_ids is not null then 'relevant_ids' else 'must_cite_one_of' end as gold_source,
        case when breaks_gold then [] else
            coalesce(list_sort(list_distinct(coalesce(relevant_ids, must_cite_one_of) ->> '$[*]')), [])
        end as gold,
        case when breaks_item_types then [] else
            list_transform(coalesce(retrieved_context, []), lambda x: x.id ->> '$')
        end as chunk_ids,
        case when breaks_item_types then [] else
            list_transform(coalesce(retrieved_context, []), lambda x: x.parent_id ->> '$')
        end as parent_ids,
        case when breaks_item_types then [] else
            list_transform(coalesce(retrieved_context, []), lambda x: x.score::double)
        end as scores,
        breaks_required or breaks_gold or breaks_item_types as breaks_rule,
        (hash(case_id ->> '$') % $partitions::ubigint)::integer as partition
    from checked
),

final as (
    select
        case_id,
        locale,
        category,
        gold_source,
        gold,
        chunk_ids,
        parent_ids,
        scores,
        breaks_rule or len(list_filter(scores, lambda s: not isfinite(s))) > 0 as breaks_rule,
        partition
    from typed
)

select * from final
