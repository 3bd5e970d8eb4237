"""Pure steps of retrieval-eval: frames and values in, frames and values out (no files, threads or caches)."""
