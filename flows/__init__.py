"""Orchestration of retrieval-eval: the job and its executors, the warehouse and its
catalog, reading and writing files, and the command line. Importing it changes nothing in
the process: the command's own settings are made by its entry (flows/commands/cli.py `console`)."""
