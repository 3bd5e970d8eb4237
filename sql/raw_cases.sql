-- raw_cases: one row per record of one run's cases.jsonl (gzip read transparently).
-- Only the fields the metrics need are read; chunk text and answers are never parsed.
-- Each value is kept as JSON so that raw_case_problems can see the type that was written.
-- Columns: case_id, locale, category, must_cite_one_of, relevant_ids (JSON),
--          retrieved_context (list of struct(id, parent_id, chunk_index, score), each JSON).
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
        retrieved_context: 'STRUCT(id JSON, parent_id JSON, chunk_index JSON, score JSON)[]'
    }
)
