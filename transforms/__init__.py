"""Pure steps of the retrieval-eval pipeline: each reads files or frames and returns new ones."""
