"""Private scratch directories for derived copies of private tables (weighted copies).

A copy of a private table is as private as the table, so its directory is created 0700 and
removed on every way out: the engine's close(), garbage collection of an engine nobody closed
(a DB-API connection left open), interpreter exit, and, after a crash or SIGKILL, the next
start-up's sweep, which removes the directories whose owning process is gone. A directory
may sit on a filesystem other machines share (a Spark cluster's scratch_dir): its owner file
names the host too, and a sweep judges only its own host's directories.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import tempfile
import threading
import time
import weakref
from pathlib import Path

from .. import owner_only

PREFIX = "dpsql-engine-"
OWNER = "owner.pid"
ORPHAN_AGE = 3600.0  # seconds: a directory without an owner file (older dpsql) is left alone this long

_live: "weakref.WeakSet[ScratchDir]" = weakref.WeakSet()
_registering = threading.RLock()  # a directory is this process's own before another thread sweeps


class ScratchDir:
    """A private directory removed on close, on collection and at exit."""

    def __init__(self, base: str | None = None):
        with _registering:
            sweep(base)
            self.path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=base))  # mode 0700, less the umask's
            os.chmod(self.path, owner_only.DIR_MODE)
            self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.path), ignore_errors=True)
            _live.add(self)
            with os.fdopen(owner_only.create(self.path / OWNER), "w") as f:
                f.write(f"{os.getpid()}\n{socket.gethostname()}")

    def file(self, name: str) -> Path:
        return self.path / name

    def protect(self) -> None:
        """Owner-only permissions on everything the engine wrote inside."""
        for p in self.path.rglob("*"):
            os.chmod(p, owner_only.DIR_MODE if p.is_dir() else owner_only.FILE_MODE)

    def empty(self) -> None:
        """Remove what the engine wrote inside, keeping the directory and its owner file."""
        for p in self.path.iterdir():
            if p.name == OWNER:
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)

    def close(self) -> None:
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive


def _owner_alive(directory: Path) -> bool:
    try:
        pid_text, _, host = (directory / OWNER).read_text().partition("\n")
        pid = int(pid_text)
    except (OSError, ValueError):
        return time.time() - directory.stat().st_mtime < ORPHAN_AGE
    if host and host != socket.gethostname():
        return True  # another machine's process: only that machine can tell
    if pid == os.getpid():
        return any(s.path == directory for s in list(_live))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(base: str | None = None) -> list[Path]:
    """Remove this user's scratch directories whose owning process has died."""
    removed = []
    root = Path(base or tempfile.gettempdir())
    try:
        candidates = list(root.glob(PREFIX + "*"))
    except OSError:
        return removed
    with _registering:
        for d in candidates:
            try:
                if d.is_dir() and not d.is_symlink() and d.stat().st_uid == os.getuid() and not _owner_alive(d):
                    shutil.rmtree(d, ignore_errors=True)
                    removed.append(d)
            except OSError:
                continue
    return removed


@atexit.register
def _remove_all() -> None:
    for s in list(_live):
        s.close()
