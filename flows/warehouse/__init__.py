"""The warehouse (SPEC 10): its transaction log and parts (warehouse.py, part_files.py), the
views over them, the catalog, the summary, the check, and the key of what a run's figures
depend on (evaluation_key.py)."""
