"""Files and directories only their owner can read: the ledger (every analyst's SCRAM verifier,
every query's text, released and cached answers, logins), its identity key, its backups, and
the releases dpsql writes.

Each is created with its final mode (files 0600, directories 0700), never chmod-ed after it was
readable: the umask can only take bits away from those modes, and whatever it took from the
owner is given back on the new, still private, file. SQLite creates a database's -wal, -shm and
-journal with the database file's own mode, so a ledger created here keeps them private too. The
umask itself is never changed: it is the whole process's, and other threads create files too.
Existing files and directories are left as their owner set them; `loose` says which are open.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

FILE_MODE = stat.S_IRUSR | stat.S_IWUSR  # 0600
DIR_MODE = stat.S_IRWXU  # 0700


def create(path: Path, flags: int = os.O_WRONLY) -> int:
    """A new file (FileExistsError if there is one), 0600; its descriptor, opened with `flags`."""
    fd = os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != FILE_MODE:  # the umask took the owner's bits (0600 otherwise)
            os.fchmod(fd, FILE_MODE)
    except OSError:
        os.close(fd)
        raise
    return fd


def open_file(path: Path, flags: int = os.O_RDWR) -> int:
    """The file at `path` opened as it is, or created 0600 if there is none."""
    while True:
        try:
            return create(path, flags)
        except FileExistsError:
            pass
        try:
            return os.open(path, flags | os.O_CLOEXEC)
        except FileNotFoundError:  # removed between the two: create it after all
            continue


def touch(path: Path) -> None:
    """Create an empty 0600 file at `path` unless one exists: a SQLite database opened there then
    keeps this mode, and gives it to its -wal, -shm and -journal. An existing file is not even
    opened: closing any descriptor of a file drops every POSIX lock this process holds on it, and
    a SQLite connection of this process relies on its locks on the database (without them,
    another process closing the ledger takes itself for the last, and removes the -shm under
    this one)."""
    with contextlib.suppress(FileExistsError):
        os.close(create(path, os.O_RDONLY))


def copy(source: Path, target: Path) -> None:
    """A new 0600 file `target` (FileExistsError if there is one) with `source`'s bytes, on disk."""
    with open(source, "rb") as src, os.fdopen(create(target), "wb") as dst:
        shutil.copyfileobj(src, dst)
        dst.flush()
        os.fsync(dst.fileno())


def make_dirs(path: Path) -> None:
    """`path` and its missing parents, each created 0700; existing ones are left as they are."""
    missing = []
    for p in (Path(path), *Path(path).parents):
        if p.is_dir():
            break
        missing.append(p)
    for p in reversed(missing):
        try:
            os.mkdir(p, DIR_MODE)
        except FileExistsError:
            continue  # another process created it meanwhile: theirs to set
        _owner_back(p)


@contextlib.contextmanager
def output(path: Path) -> Iterator[Path]:
    """A path for a program that writes a file its own way (DuckDB's COPY ... TO replaces the
    target with a file of the umask's mode), inside a fresh 0700 directory beside `path`: on
    success the file is made 0600 there, where nobody else can reach it, and renamed onto `path`."""
    path = Path(path)
    private = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        _owner_back(private)
        inside = private / path.name
        yield inside
        os.chmod(inside, FILE_MODE)
        os.replace(inside, path)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _owner_back(directory: Path) -> None:
    """0700 for a directory just made 0700 less the umask: nobody else could enter it meanwhile,
    and only the owner's bits can be missing (under any usual umask, none are: nothing to do)."""
    if stat.S_IMODE(os.stat(directory).st_mode) != DIR_MODE:
        os.chmod(directory, DIR_MODE)


_OTHERS_CAN = (("read", stat.S_IRGRP | stat.S_IROTH), ("write", stat.S_IWGRP | stat.S_IWOTH))


def loose(paths: Iterable[Path]) -> list[str]:
    """A warning, with the fix, for each existing file among `paths` its group or others may use."""
    warnings = []
    for p in paths:
        try:
            mode = stat.S_IMODE(os.stat(p).st_mode)
        except OSError:
            continue
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            can = [what for what, bits in _OTHERS_CAN if mode & bits]
            warnings.append(
                f"{p} has mode {mode:04o}: users other than its owner can {' and '.join(can) or 'use'} "
                f"it; make it private with: chmod 600 {p}"
            )
    return warnings
