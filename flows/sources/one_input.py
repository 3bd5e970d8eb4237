"""A run read from one input file and its qrels — a TREC run file, another tool's export
(flows/sources/trec_files.py `TrecSource`, flows/sources/format_sources.py `FormatSource`):
what the `RunSource` protocol (flows/sources/source.py) asks of such a run that does not depend
on its format. Each format adds its fingerprint and its ingest."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...transforms.manifest import Manifest
from .stored_file import StoredFile


def artifacts_digest(input_digest: str, qrels_digest: str | None) -> str:
    """What the warehouse records as the artifact digest of a run read from an input file and
    its qrels: both files' BLAKE3, the input's alone when it holds its own gold (no qrels)."""
    return f"blake3:{input_digest}" + ("" if qrels_digest is None else f"+blake3:{qrels_digest}")


@dataclass(frozen=True)
class OneInputSource:
    """`input`, the file the run's cases are read from, and `qrels`, its gold when kept apart
    (None: the input holds it); `manifest` is made of the files (flows/sources/trec_files.py
    `input_manifest`)."""

    manifest: Manifest
    input: StoredFile
    qrels: StoredFile | None

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def cases_uri(self) -> str:
        return self.input.location

    def cases_size(self) -> int:
        return self.input.size()

    def local_cases_file(self, folder: Path) -> Path:
        return self.input.local_copy(folder)

    def byte_ranges(self, n: int) -> list[tuple[int, int]]:
        """One range: no part of such a file is a run of its own (a topic's lines may lie
        anywhere in a TREC run, and a tool's export is read whole by its reader)."""
        return [(0, self.input.size())]

    def copy_range(self, start: int, end: int, folder: Path) -> Path:
        return self.input.copy_range(start, end, folder)

    def digest(self) -> str:
        """The input's and the qrels' (`artifacts_digest`), as the format's ingest records it."""
        qrels = None if self.qrels is None else self.qrels.digest().removeprefix("blake3:")
        return artifacts_digest(self.input.digest().removeprefix("blake3:"), qrels)
