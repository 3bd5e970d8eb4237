"""`python -m retrieval_eval`: the same command as `retrieval-eval`."""

from .flows.entry import console

raise SystemExit(console())
