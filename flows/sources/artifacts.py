"""Run artifacts (SPEC 3): run folders, their manifests and cases files, on a local disk or in a
bucket (SPEC 14), and small JSON files read with a message that names them."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...transforms.deep_json import TooDeep
from ...transforms.errors import InputError
from ...transforms.manifest import Manifest, parse_manifest
from ...transforms.records import UnkeepableText, strict_json_loads
from ..storage import NotFound, ObjectInfo, open_store, parse_location
from .strict_read import Prefetch, streamable
from .schemas import validate
from .stored_file import StoredFile, is_uri

if TYPE_CHECKING:
    from .ingest import Ingest

CASE_FILE_NAMES = ("cases.jsonl", "cases.jsonl.gz")
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class RunFolder:
    """A run folder whose manifest was read and checked, and its one cases file: a source of
    run artifacts (flows/sources/source.py `RunSource`)."""

    manifest: Manifest
    run_dir: str  # an absolute path or a URI
    manifest_file: StoredFile
    cases: StoredFile

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def cases_uri(self) -> str:
        return self.cases.location

    def fingerprint(self) -> list:
        """The manifest's and the cases file's (StoredFile.fingerprint), without reading them."""
        return [self.manifest_file.fingerprint(), self.cases.fingerprint()]

    def cases_size(self) -> int:
        return self.cases.size()

    def local_cases_file(self, folder: Path) -> Path:
        return self.cases.local_copy(folder)

    def byte_ranges(self, n: int) -> list[tuple[int, int]]:
        """Ranges of whole lines: a line of a cases file is one case (one range for a .gz)."""
        return self.cases.line_ranges(n)

    def copy_range(self, start: int, end: int, folder: Path) -> Path:
        return self.cases.copy_range(start, end, folder)

    def digest(self) -> str:
        return self.cases.digest()

    def ingest(self, scratch: Path, *, allow_rejects: bool, relevance_level: int, batch_items: int,
               committed_digest: str | None, prefetch: Prefetch | None = None) -> Ingest:
        from .ingest import Ingest  # deferred: it imports Polars, and the CLI imports this module before the engines
        read = prefetch.take(self.cases) if prefetch is not None else None
        return Ingest(self.cases, scratch, allow_rejects=allow_rejects, relevance_level=relevance_level,
                      batch_items=batch_items, read=read, committed_digest=committed_digest)


def read_json_file(path: Path | StoredFile, missing_hint: str, max_depth: int | None = None) -> object:
    """Parse a small JSON file, local or in a bucket (transforms/records.py `strict_json_loads`,
    nested at most `max_depth` containers when given); a missing or malformed file is an
    InputError naming it, and the field when the refusal has one."""
    shown = path.location if isinstance(path, StoredFile) else path
    try:
        data = path.read_bytes()
        return strict_json_loads(data.decode("utf-8"), max_depth)
    except (TooDeep, UnkeepableText) as error:
        raise InputError(f"{shown}: {error}") from None
    except (FileNotFoundError, NotFound):
        raise InputError(f"{shown}: missing ({missing_hint})") from None
    except IsADirectoryError:
        raise InputError(f"{shown}: is a folder, not a file") from None
    except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError is a ValueError
        raise InputError(f"{shown}: not valid JSON ({error})") from None


def the_one_cases_file(run_dir: str, present: list[str]) -> str:
    """The name of the run's one cases file among the names `present` in it; both or neither
    is bad input (SPEC 6)."""
    found = [name for name in CASE_FILE_NAMES if name in present]
    if not found:
        raise InputError(f"{run_dir}: no cases.jsonl or cases.jsonl.gz")
    if len(found) > 1:
        raise InputError(f"{run_dir}: holds both cases.jsonl and cases.jsonl.gz; keep one")
    return found[0]


def cases_file_in(run_dir: Path) -> Path:
    """The local run folder's one cases file."""
    return run_dir / the_one_cases_file(str(run_dir), [n for n in CASE_FILE_NAMES if (run_dir / n).is_file()])


def checked_manifest(run_dir: str, manifest_file: StoredFile) -> Manifest:
    """The run folder's manifest, read and checked (its `run_id` must be the folder's name)."""
    data = read_json_file(manifest_file, "every run folder needs a manifest.json")
    try:
        return parse_manifest(data, manifest_file.location, folder_name(run_dir))
    except InputError as refused:
        raise InputError(with_every_problem(str(refused), data, manifest_file.location)) from None


def folder_name(run_dir: str) -> str:
    """A run folder's name (its path's or URI's last segment): the run id it must hold."""
    return run_dir.rstrip("/").rsplit("/", 1)[-1]


def recorded_source(run_dir: str, committed: Mapping[str, dict]) -> dict:
    """What the warehouse recorded of the artifacts of the run this folder holds (its log's
    source record: `stamp` — the manifest's fingerprint, then the cases file's —, `manifest`,
    ...); empty when it holds no such run."""
    return committed.get(folder_name(run_dir)) or {}


def recorded_manifest(run_dir: str, manifest_file: StoredFile, committed: Mapping[str, dict]) -> Manifest | None:
    """The manifest a committed run recorded, when the stored manifest is still that file
    (its fingerprint is the first of the run's recorded stamp); None otherwise."""
    recorded = recorded_source(run_dir, committed)
    stamp, fields = recorded.get("stamp"), recorded.get("manifest")
    if not fields or not stamp or stamp[0] != manifest_file.fingerprint():
        return None
    return parse_manifest(fields, manifest_file.location, folder_name(run_dir))


def load_run_folder(run_dir: Path) -> RunFolder:
    """Read and check the local `run_dir/manifest.json` and find its cases file."""
    run_dir = run_dir.absolute()
    manifest_file = StoredFile(str(run_dir / MANIFEST))
    manifest = checked_manifest(str(run_dir), manifest_file)
    return RunFolder(manifest, str(run_dir), manifest_file, StoredFile(str(cases_file_in(run_dir))))


def with_every_problem(message: str, manifest: object, path: Path | str) -> str:
    """The loader's message on a manifest it refused (transforms/manifest.py stops at the
    first problem), followed by every problem the manifest schema finds when there are
    several, each as `file: field: problem`. The loader alone decides what is accepted."""
    problems = validate(manifest, "manifest")
    if len(problems) < 2:
        return message
    return "\n".join([message, f"{path}: every problem, by docs/schema/manifest.schema.json:",
                      *(f"  {path}: {problem}" for problem in problems)])


def find_run_dirs(runs: Path) -> list[Path]:
    """Local RUNS is one run folder (it has a manifest.json) or a root of run folders."""
    if not runs.exists():
        raise InputError(f"{runs}: no such runs folder")
    if not runs.is_dir():
        raise InputError(f"{runs}: not a folder (give a runs root or one run folder)")
    if (runs / MANIFEST).exists():
        return [runs]
    run_dirs = sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not run_dirs:
        raise InputError(f"{runs}: holds no run folders")
    return run_dirs


def stored_run_folders(runs: str) -> dict[str, dict[str, ObjectInfo]]:
    """RUNS in a bucket, from one listing of it: each run folder's URI → its files by name
    (with the size and etag the listing gave). A run folder is a key prefix one level below
    the root (or the root itself when it holds manifest.json); as on disk, a name starting
    with "." is not a run folder, and every other one must be a run folder."""
    store, prefix = open_store(runs)
    root = str(parse_location(runs))
    listed = [(info.key[len(prefix):].lstrip("/") if prefix else info.key, info) for info in store.list(prefix)]
    if not listed:
        raise InputError(f"{root}: no such runs folder (no object under it)")
    own = {name: info for name, info in listed if "/" not in name}
    if MANIFEST in own:
        return {root: own}
    folders: dict[str, dict[str, ObjectInfo]] = {}
    for name, info in listed:
        folder, _, rest = name.partition("/")
        if rest and not folder.startswith("."):
            files = folders.setdefault(f"{root}/{folder}", {})
            if "/" not in rest:
                files[rest] = info
    if not folders:
        raise InputError(f"{root}: holds no run folders")
    return dict(sorted(folders.items()))


# Manifests read at once from a bucket: one GET each, which 300 runs paid one after another.
MANIFEST_READS = 16


def load_stored_run_folders(runs: str, committed: Mapping[str, dict]) -> list[RunFolder]:
    """Every run folder of RUNS in a bucket, its manifest read and checked (the first bad one,
    in the order of the folders, is the one said). A manifest whose object the listing shows
    to be the one a committed run recorded (size, etag, checksum) is taken from the log's
    record: an unchanged re-run reads no object per run (SPEC 14)."""

    def load(folder: tuple[str, dict[str, ObjectInfo]]) -> RunFolder:
        run_dir, files = folder
        manifest = StoredFile(f"{run_dir}/{MANIFEST}", files.get(MANIFEST))
        if manifest.info is None:
            raise InputError(f"{manifest.location}: missing (every run folder needs a manifest.json)")
        checked = recorded_manifest(run_dir, manifest, committed) or checked_manifest(run_dir, manifest)
        cases = the_one_cases_file(run_dir, list(files))
        return RunFolder(checked, run_dir, manifest, StoredFile(f"{run_dir}/{cases}", files[cases]))

    with ThreadPoolExecutor(max_workers=MANIFEST_READS) as pool:
        return list(pool.map(load, stored_run_folders(runs).items()))


def load_run_folders(runs: Path | str, committed: Mapping[str, dict] | None = None) -> list[RunFolder]:
    """Every run folder of RUNS (a local path or a URI), each manifest checked before anything
    is written (SPEC 6); two folders with one run_id cannot happen (the id is the folder name).
    `committed`: the source records of the runs the warehouse holds (`load_stored_run_folders`)."""
    if is_uri(runs):
        return load_stored_run_folders(str(runs), committed or {})
    local = Path(StoredFile.at(runs).location) if "://" in str(runs) else Path(runs)
    return [load_run_folder(run_dir) for run_dir in find_run_dirs(local)]


def first_cases_file(runs: Path | str, committed: Mapping[str, dict]) -> StoredFile | None:
    """The cases file that the runs of RUNS are read from first (local, or in a bucket when its
    strict read can start from memory, `streamable`), to be read ahead while the engines are
    imported; None when RUNS is not as it should be (reading the manifests then says why), or
    when that file is the one its run recorded (`committed`: the warehouse's source records),
    whose evaluation then likely stands: an unchanged run is not read (SPEC 14)."""
    try:
        if is_uri(runs):
            run_dir, files = next(iter(stored_run_folders(str(runs)).items()))
            name = the_one_cases_file(run_dir, list(files))
            cases = StoredFile(f"{run_dir}/{name}", files[name])
        else:
            cases_path = cases_file_in(find_run_dirs(Path(runs))[0]).absolute()
            run_dir, cases = str(cases_path.parent), StoredFile(str(cases_path))
    except InputError:
        return None
    if not cases.is_local and not streamable(cases.name):
        return None
    stamp = recorded_source(run_dir, committed).get("stamp")
    if stamp and stamp[-1] == cases.fingerprint():
        return None
    return cases
