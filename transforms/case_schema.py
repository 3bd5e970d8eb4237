"""The Arrow shape of a cases file (SPEC 3) and the signal that the fast read cannot take
it, in a module of their own: flows/sources/case_file.py starts the read with them before Polars
and DuckDB are imported (an import of transforms/staging.py would bring Polars in first).
"""

from __future__ import annotations

import pyarrow as pa

# SPEC 3: the fields the metrics read, with their types; any other field, at any depth, is
# parsed as JSON and dropped.
RETRIEVED_ITEM = pa.struct([("id", pa.string()), ("parent_id", pa.string()), ("score", pa.float64())])
GRADE = pa.struct([("card_id", pa.string()), ("grade", pa.int64())])
_COMMON_FIELDS = [
    ("case_id", pa.string()),
    ("locale", pa.string()),
    ("category", pa.string()),
    ("question", pa.string()),
    ("query", pa.string()),
    ("must_cite_one_of", pa.list_(pa.string())),
    ("relevant_ids", pa.list_(pa.string())),
    ("retrieved_context", pa.list_(RETRIEVED_ITEM)),
]
# A cases file as written: Arrow cannot read an object with free keys ({card_id: grade}), so
# the first read only sees whether `relevance` is there; a file that has it is read by the
# line-by-line rules, which write `relevance` as a list of {card_id, grade} (below).
CASES_SCHEMA = pa.schema([*_COMMON_FIELDS, ("relevance", pa.struct([]))])
# The clean copy the line-by-line rules write of a file's valid records.
CLEAN_CASES_SCHEMA = pa.schema([*_COMMON_FIELDS, ("relevance", pa.list_(GRADE))])
