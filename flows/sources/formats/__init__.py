"""Readers of other tools' stored results (SPEC 15): one module per format, each exposing
`read_cases(path, *, qrels)` that yields FormatRecords (record.py) — a case in the SPEC 3
shape or a reject, named by its origin. The record rules of a cases file then run on each
case as on a native record; the text identity of a stored chunk is identity.py's, the gold
files that `--qrels` names are qrels.py's."""

from . import beir, deepeval, mlflow, openinference, ragas, ranx

# Format name → its reader, as `run --source FORMAT` names them.
READERS = {
    "beir": beir.read_cases,
    "ranx": ranx.read_cases,
    "ragas": ragas.read_cases,
    "mlflow": mlflow.read_cases,
    "deepeval": deepeval.read_cases,
    "openinference": openinference.read_cases,
}
