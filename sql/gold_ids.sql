-- gold_ids: one row per gold id written in a run's cases file, in any gold field
-- (`relevance` counts every graded card, whatever its grade).
-- Parameters: $path (the cases file), $run_id. Grain: (run_id, case_id, field, gold_id), unordered.
-- Columns: run_id, case_id, field, gold_id
with records as (
    select *
    from read_json(
        $path,
        format = 'newline_delimited',
        compression = 'auto_detect',
        columns = {
            case_id: 'VARCHAR',
            must_cite_one_of: 'VARCHAR[]',
            relevant_ids: 'VARCHAR[]',
            relevance: 'MAP(VARCHAR, BIGINT)'
        }
    )
),

final as (
    select $run_id as run_id, case_id, 'must_cite_one_of' as field, unnest(must_cite_one_of) as gold_id
    from records
    union all
    select $run_id, case_id, 'relevant_ids', unnest(relevant_ids)
    from records
    union all
    select $run_id, case_id, 'relevance', unnest(map_keys(relevance))
    from records
)

select * from final
