"""DuckDB SQL models of the pipeline, one model per file, loaded by name."""

from functools import cache
from importlib.resources import files


@cache
def load(name: str) -> str:
    """Text of ``sql/<name>.sql``."""
    return files(__name__).joinpath(f"{name}.sql").read_text(encoding="utf-8")
