"""The files a command writes for its user (every `--out` and the report's files), to a local
path or a URI (SPEC 14). A local file is written beside itself and moved into place, and a
failed write is named by the path the user gave; a URI's files are written to a private
temporary folder, then each is put to its store whole, so no reader sees one half-written."""

from __future__ import annotations

import errno
import io
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from . import open_store
from .errors import NotFound, StoreError
from .locations import Location, LocationError, join_key, parse_location


class _OutputFile(io.RawIOBase):
    """The bytes of an output file, whose failed write or close (a full disk, /dev/full, an
    I/O error) is named by the path the user gave, not by a file beside it or by none."""

    def __init__(self, path: Path, shown: Path) -> None:
        self._shown = shown
        self._file = None
        try:
            # A descriptor of this process (/dev/stdout, /dev/fd/N) is written where it stands:
            # opening its path again would truncate a file it appends to (`>> log`).
            descriptor = own_descriptor(path)
            self._file = io.FileIO(path, "w") if descriptor is None else io.FileIO(os.dup(descriptor), "w")
        except OSError as error:  # a folder that refuses a new file, a device that refuses writes
            raise self._named(error) from error

    def writable(self) -> bool:
        return True

    # No fileno(): a writer handed one (Polars' CSV writer) writes to it past `write`, and says
    # a failure without the path.

    def write(self, data) -> int:
        try:
            return self._file.write(data)
        except OSError as error:
            raise self._named(error) from error

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._file is not None:
                self._file.close()
        except OSError as error:
            raise self._named(error) from error
        finally:
            super().close()

    def _named(self, error: OSError) -> OSError:
        return OSError(error.errno, error.strerror, str(self._shown))


MAX_LINKS = 40  # Linux's own limit on the links one path may pass through
OWN_DESCRIPTOR = re.compile(r"/proc/(?:self|thread-self|(\d+))/fd/(\d+)")


def _link_end(path: Path) -> Path:
    """Where the symbolic links of `path` lead, followed one at a time, stopping at the first
    hop into /proc (whose links name open files, not paths to write through)."""
    hop = Path(os.path.abspath(path))
    for _ in range(MAX_LINKS):
        hop = Path(os.path.realpath(hop.parent)) / hop.name
        if hop.is_relative_to("/proc") or not hop.is_symlink():
            return hop
        hop = Path(os.path.abspath(hop.parent / os.readlink(hop)))
    raise OSError(errno.ELOOP, "too many levels of symbolic links", str(path))


def replaced_file(path: Path) -> Path | None:
    """The regular file that writing `path` replaces: `path` itself, or the file its symbolic
    links lead to (written there, so the links stay links). None when `path` is written
    directly: a device (/dev/null, /dev/full), a FIFO, or a path that leads through /proc
    (/dev/stdout, /dev/fd/N), whose bytes belong to an open file of this process."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
    except FileNotFoundError:
        pass  # a new file, or a link to one
    end = _link_end(path)
    return None if end.is_relative_to("/proc") else end


def own_descriptor(path: Path) -> int | None:
    """The open descriptor of this process that `path` names (/dev/stdout, /dev/fd/1,
    /proc/self/fd/1), or None."""
    named = OWN_DESCRIPTOR.fullmatch(str(_link_end(path)))
    if named is None or (named.group(1) is not None and int(named.group(1)) != os.getpid()):
        return None
    return int(named.group(2))


@contextmanager
def written_aside(path: Path, *, binary: bool = False) -> Iterator[IO]:
    """A handle on the file `path` names (every `--out` and the report's files). A regular
    file (or the one a symbolic link leads to) is written beside itself and moved into place
    once the block ends well, so nothing half-written (an interrupt, a full disk) is ever seen
    there; a device, a FIFO or /dev/stdout is written directly, never replaced. A folder at
    `path`, a missing folder to put it in, and a failed write are named as the path given."""
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a folder; give a file's path", str(path))
    if not path.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, "no such folder", str(path.parent))
    target = replaced_file(path)
    if target is None:
        with _opened(path, path, binary) as handle:
            yield handle
        return
    if not target.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, "no such folder", str(target.parent))
    aside = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        with _opened(aside, path, binary) as handle:
            yield handle
        if target.exists():
            os.chmod(aside, stat.S_IMODE(target.stat().st_mode))  # the file it replaces keeps its mode
        os.replace(aside, target)
    finally:
        aside.unlink(missing_ok=True)


def _opened(path: Path, shown: Path, binary: bool) -> IO:
    buffered = io.BufferedWriter(_OutputFile(path, shown))
    if binary:
        return buffered
    return io.TextIOWrapper(buffered, encoding="utf-8", newline="\n")


def output_target(given: str | Path | Location) -> Path | Location:
    """Where an output goes, as the user gave it: a local path, kept as written (its links and
    devices follow `written_aside`'s rules), or the location of a URI. A `file://` URI is a
    local path."""
    if isinstance(given, Location):
        return given
    if isinstance(given, Path) or "://" not in given:
        return Path(given)
    location = parse_location(given)
    return Path(str(location)) if location.is_local else location


def output_file(given: str | Path | Location) -> Path | Location:
    """Where an output file goes (every `--out`): `output_target`, where a URI that names a
    folder (a bucket, or a key ending in "/") is refused, as a local folder is."""
    target = output_target(given)
    if isinstance(target, Location) and (not target.path or str(given).endswith("/")):
        raise LocationError(f"{target}: names a folder of the store, not an object; give a file's URI "
                            f"({join_key(str(target), 'name.ext')})")
    return target


def shown_path(target: Path | Location, name: str) -> Path | str:
    """The file `name` inside the output folder `target`, as the user is told it: a local path,
    or its URI."""
    return target / name if isinstance(target, Path) else str(target.join(name))


@contextmanager
def written_to(given: str | Path | Location, *, binary: bool = False) -> Iterator[IO]:
    """A handle on the output file `given` (`output_file`): a local path as `written_aside`
    writes it; a URI written to a private temporary file, then put to its store whole (in place
    of what was there) once the block ends well."""
    target = output_file(given)
    if isinstance(target, Path):
        with written_aside(target, binary=binary) as handle:
            yield handle
        return
    with tempfile.TemporaryDirectory(prefix="retrieval-eval-out-") as folder:
        local = Path(folder, target.path.rsplit("/", 1)[-1])
        with _opened(local, local, binary) as handle:
            yield handle
        put_files(target, {"": local})


@contextmanager
def output_folder(target: Path | Location, *, put_last: tuple[str, ...] = ()) -> Iterator[Path]:
    """The local folder in which a folder of outputs (the report) is written: `target` itself,
    made if missing, when it is local. For a URI, a private temporary folder whose files are
    put under it once the block ends well, each in place of the one of the previous run; the
    files named in `put_last` go last, in that order (the pages after the charts they show)."""
    if isinstance(target, Path):
        target.mkdir(parents=True, exist_ok=True)
        yield target
        return
    with tempfile.TemporaryDirectory(prefix="retrieval-eval-report-") as folder:
        yield Path(folder)
        names = sorted(path.name for path in Path(folder).iterdir() if path.is_file())
        order = [name for name in names if name not in put_last] + [name for name in put_last if name in names]
        put_files(target, {name: Path(folder, name) for name in order})


def put_files(target: Location, files: dict[str, Path]) -> None:
    """Put each local file of `files` (by its name below `target`, "" for `target` itself) to
    `target`'s store, replacing the object there. A failure (a missing bucket, an endpoint
    down, access denied) is the store's error, naming the object's URI."""
    store, prefix = open_store(target)
    for name, path in files.items():
        where = str(target.join(name))
        try:
            store.put(join_key(prefix, name), path, overwrite=True)
        except StoreError as error:
            reason = "no such bucket" if isinstance(error, NotFound) else str(error).removeprefix(f"{where}: ")
            raise type(error)(f"{where}: not written: {reason}") from None
