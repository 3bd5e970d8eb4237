-- export_ranked_cards: the distinct cards of each case of run $run_id in card-rank order, with
-- the score a TREC run file gives them (`retrieval-eval export --format trec-run`).
-- trec_eval ranks by score descending, ties by docno descending, never by the rank column:
-- a case keeps its scores only when they strictly fall with card rank; a case with a missing
-- score, a tie or a rise gets trec_score = n_cards - card_rank + 1 instead, so that trec_eval
-- and `run --trec-run` read back the same ranking. A card's score is its first chunk's.
-- Reads: retrieved. Parameters: $run_id. Grain: (case_id, card_rank).
-- Columns: case_id, card_id, card_rank, trec_score
with cards as (
    select case_id, card_id, card_rank, score
    from retrieved
    where run_id = $run_id and card_rank is not null
),

falling as (
    select
        *,
        score < lag(score) over (partition by case_id order by card_rank) as falls,
        count(*) over (partition by case_id) as n_cards
    from cards
),

per_case as (
    select case_id, bool_and(score is not null and coalesce(falls, true)) as keeps_scores
    from falling
    group by case_id
),

final as (
    select
        falling.case_id,
        falling.card_id,
        falling.card_rank,
        (case when per_case.keeps_scores then falling.score else falling.n_cards - falling.card_rank + 1 end)::double
            as trec_score
    from falling
    join per_case using (case_id)
)

select * from final order by case_id, card_rank
