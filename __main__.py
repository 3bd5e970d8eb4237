"""`python -m retrieval_eval`: the same command as `retrieval-eval`."""

if __name__ == "__main__":  # not when a worker process re-imports the main module (multiprocessing spawn)
    from .flows.commands.entry import console

    raise SystemExit(console())
