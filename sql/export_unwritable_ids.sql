-- export_unwritable_ids: ids of run $run_id that a TREC run file cannot hold as one field: a
-- case id or card id holding whitespace (C isspace, what trec_eval splits on), or a case id
-- that opens with '#' (`run --trec-run` reads that line as a comment). Only the first few.
-- Reads: retrieved. Parameters: $run_id. Grain: one row per offending (kind, id).
-- Columns: kind ('case id' or 'card id'), id
with ids as (
    select distinct 'case id' as kind, case_id as id from retrieved where run_id = $run_id
    union all
    select distinct 'card id' as kind, card_id as id from retrieved where run_id = $run_id
),

final as (
    select kind, id
    from ids
    where regexp_matches(id, '[ \t\n\v\f\r]') or (kind = 'case id' and starts_with(id, '#'))
)

select * from final order by kind, id limit 5
