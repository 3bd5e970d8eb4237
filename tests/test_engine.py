"""engine.write_parquet: every column type the warehouse writes comes back as it went in, and
the record it returns (size, rows, BLAKE3) is the file's."""

import polars as pl
from blake3 import blake3
from retrieval_eval.flows import engine


def test_parquet_round_trip_of_flat_and_nested_strings(tmp_path):
    # Flat strings go to Arrow's writer as string views; under a list or a struct they
    # cannot (pyarrow refuses nested views), which a staged partition and `cases` hold.
    frame = pl.DataFrame(
        {
            "case_id": ["c1", "c2", "a longer id than twelve bytes"],
            "gold": [["card-1"], [], None],
            "retrieved_context": [[{"id": "x::01", "parent_id": None, "score": 0.5}], [], []],
            "rank": pl.Series([1, 2, 3], dtype=pl.Int32),
        }
    )
    for name, dictionary in (("all.parquet", True), ("ids.parquet", ["case_id"])):
        path = tmp_path / name
        part = engine.write_parquet(frame, path, tmp_path, compression="lz4", dictionary=dictionary)
        assert pl.read_parquet(path).equals(frame)
        assert part.path == name and part.rows == 3
        assert part.bytes == path.stat().st_size and part.blake3 == blake3(path.read_bytes()).hexdigest()
