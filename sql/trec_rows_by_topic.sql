-- trec_rows_by_topic: the valid rows of a TREC run file whose topics are not contiguous, put
-- in topic order (flows/sources/trec_files.py); transforms/trec.py rank_topics ranks each topic's
-- documents afterwards, so only the topic order matters here.
-- Reads: the Parquet files $files, the rows of the file's blocks. Parameters: $files.
-- Grain: one row per valid run line. Columns: qid, docno, score
with rows as (
    select qid, docno, score from read_parquet($files)
),

final as (
    select * from rows
)

select * from final order by qid
