-- raw_case_problems: one row — how many records of raw_cases break a record rule.
-- This model only detects; transforms/records.py states each rule and names the failure
-- with file and line. It must flag at least every record those rules reject.
-- Columns: n_bad_records, n_repeated_case_ids
with bad_records as (
    select *
    from raw_cases
    where json_type(case_id) is distinct from 'VARCHAR' or case_id ->> '$' = ''
        or json_type(locale) is distinct from 'VARCHAR' or locale ->> '$' = ''
        or json_type(category) is distinct from 'VARCHAR' or category ->> '$' = ''
        or (must_cite_one_of is not null and (
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
        ))
        or len(list_filter(
            retrieved_context,
            lambda x: x.id is null
                or json_type(x.id) <> 'VARCHAR'
                or x.id ->> '$' = ''
                or (x.parent_id is not null and json_type(x.parent_id) <> 'VARCHAR')
                or (x.chunk_index is not null and json_type(x.chunk_index) not in ('UBIGINT', 'BIGINT'))
                or (x.score is not null and (
                    json_type(x.score) not in ('DOUBLE', 'UBIGINT', 'BIGINT')
                    or not isfinite(x.score::double)
                ))
        )) > 0
),

final as (
    select
        (select count(*) from bad_records) as n_bad_records,
        (select count(*) - count(distinct case_id) from raw_cases) as n_repeated_case_ids
)

select * from final
