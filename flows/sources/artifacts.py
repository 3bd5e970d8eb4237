"""Run artifacts on disk (SPEC 3): run folders, their manifests and cases files, and small
JSON files read with a message that names them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...transforms.deep_json import TooDeep
from ...transforms.errors import InputError
from ...transforms.manifest import Manifest, parse_manifest
from ...transforms.records import UnkeepableText, strict_json_loads
from .schemas import validate

CASE_FILE_NAMES = ("cases.jsonl", "cases.jsonl.gz")


@dataclass(frozen=True)
class RunFolder:
    """A run folder whose manifest was read and checked, and its one cases file."""

    manifest: Manifest
    run_dir: Path  # absolute
    cases_file: Path  # absolute

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    @property
    def files(self) -> tuple[Path, ...]:
        """The files the run's evaluation reads (flows/job/plan.py stamps them)."""
        return (self.run_dir / "manifest.json", self.cases_file)


def read_json_file(path: Path, missing_hint: str, max_depth: int | None = None) -> object:
    """Parse a small JSON file (transforms/records.py `strict_json_loads`, nested at most
    `max_depth` containers when given); a missing or malformed file is an InputError naming
    it, and the field when the refusal has one."""
    try:
        return strict_json_loads(path.read_text(encoding="utf-8"), max_depth)
    except (TooDeep, UnkeepableText) as error:
        raise InputError(f"{path}: {error}") from None
    except FileNotFoundError:
        raise InputError(f"{path}: missing ({missing_hint})") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder, not a file") from None
    except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError is a ValueError
        raise InputError(f"{path}: not valid JSON ({error})") from None


def cases_file_in(run_dir: Path) -> Path:
    """The run's one cases file; both or neither is bad input (SPEC 6)."""
    found = [run_dir / name for name in CASE_FILE_NAMES if (run_dir / name).is_file()]
    if not found:
        raise InputError(f"{run_dir}: no cases.jsonl or cases.jsonl.gz")
    if len(found) > 1:
        raise InputError(f"{run_dir}: holds both cases.jsonl and cases.jsonl.gz; keep one")
    return found[0]


def load_run_folder(run_dir: Path) -> RunFolder:
    """Read and check `run_dir/manifest.json` and find its cases file."""
    run_dir = run_dir.absolute()
    path = run_dir / "manifest.json"
    data = read_json_file(path, "every run folder needs a manifest.json")
    try:
        manifest = parse_manifest(data, str(path), run_dir.name)
    except InputError as refused:
        raise InputError(with_every_problem(str(refused), data, path)) from None
    return RunFolder(manifest, run_dir, cases_file_in(run_dir))


def with_every_problem(message: str, manifest: object, path: Path) -> str:
    """The loader's message on a manifest it refused (transforms/manifest.py stops at the
    first problem), followed by every problem the manifest schema finds when there are
    several, each as `file: field: problem`. The loader alone decides what is accepted."""
    problems = validate(manifest, "manifest")
    if len(problems) < 2:
        return message
    return "\n".join([message, f"{path}: every problem, by docs/schema/manifest.schema.json:",
                      *(f"  {path}: {problem}" for problem in problems)])


def find_run_dirs(runs: Path) -> list[Path]:
    """RUNS is one run folder (it has a manifest.json) or a root of run folders."""
    if not runs.exists():
        raise InputError(f"{runs}: no such runs folder")
    if not runs.is_dir():
        raise InputError(f"{runs}: not a folder (give a runs root or one run folder)")
    if (runs / "manifest.json").exists():
        return [runs]
    run_dirs = sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not run_dirs:
        raise InputError(f"{runs}: holds no run folders")
    return run_dirs


def load_run_folders(runs: Path) -> list[RunFolder]:
    """Every run folder of RUNS, each manifest checked before anything is written (SPEC 6);
    two folders with one run_id cannot happen (the id is the folder name)."""
    return [load_run_folder(run_dir) for run_dir in find_run_dirs(runs)]


def first_cases_file(runs: Path) -> Path | None:
    """The cases file that the runs of RUNS are read from first, or None when RUNS is not
    as it should be (reading the manifests then says why)."""
    try:
        return cases_file_in(find_run_dirs(runs)[0]).absolute()
    except InputError:
        return None
