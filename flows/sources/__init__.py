"""Readers of run artifacts: run folders and manifests (artifacts.py), cases files (case_file.py
and its strict C parser), their ingest into batches (ingest.py), rejects (reject_stream.py),
TREC run and qrels files (trec_files.py), and the JSON schemas the files are checked against."""
