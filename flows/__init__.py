"""Orchestration of retrieval-eval, split by the direction of dependency: commands/ (the CLI
and the Python API) → job/ (the one loop and its executors) → outputs/ (report, gate,
comparison, query, export) → warehouse/ and inputs/ (options, KB, baseline) → sources/ (readers
of run artifacts) → storage/ (the store), with transforms/ and sql/ below; tests/test_layering.py
holds every import to that order. Importing it changes nothing in the process: the command's
own settings are made by its entry (flows/commands/cli.py `console`)."""
