-- audit run_kb: a run's KB is recorded whole or not at all: kb_uri and kb_digest are both null
-- (no KB, or a run written before runs recorded it) or both set, the digest as "blake3:" and
-- 64 hex digits, the location an absolute path or a URI (s3://bucket/key: SPEC 14).
-- Reads: runs. Returns: audit, run_id, detail.
with broken as (
    select run_id, kb_uri, kb_digest
    from runs
    where (kb_uri is null) <> (kb_digest is null)
       or not regexp_full_match(kb_digest, 'blake3:[0-9a-f]{64}')
       or not (starts_with(kb_uri, '/') or regexp_full_match(kb_uri, '[a-z][a-z0-9+.-]*://[^/@]+/.+'))
),

final as (
    select 'run_kb' as audit, run_id,
        'runs records kb_uri ' || coalesce(kb_uri, 'null')
        || ' with kb_digest ' || coalesce(kb_digest, 'null') as detail
    from broken
)

select * from final
