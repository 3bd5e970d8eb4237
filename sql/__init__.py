"""DuckDB SQL models of the pipeline, one model per file, loaded by name."""

from functools import cache
from importlib.resources import files


@cache
def load(name: str) -> str:
    """Text of ``sql/<name>.sql``."""
    return files(__name__).joinpath(f"{name}.sql").read_text(encoding="utf-8")


def audits() -> dict[str, str]:
    """Every data audit of ``sql/audits/``, name → text (each returns the rows that break it)."""
    folder = files(__name__).joinpath("audits")
    return {item.name.removesuffix(".sql"): item.read_text(encoding="utf-8")
            for item in sorted(folder.iterdir(), key=lambda i: i.name) if item.name.endswith(".sql")}
