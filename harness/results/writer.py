"""Appending result rows as they finish, under a lock per results directory.

``RowWriter`` is what the measurement engine writes through::

    meta = RunMeta(matrix="production", commit=sha, arch="sm90", environment=env, ...)
    with RowWriter(run_dir("results", sha, "sm90") / "production.csv", meta=meta,
                   mode="resume") as out:
        for case, path, mode in work:
            if (case.id, path, mode) in out.done_keys:
                continue                  # finished by an earlier, interrupted run
            out.write(measure(case, path, mode))   # on disk (flushed + fsynced) on return

Each row is one flushed and fsynced line, so an interrupted run loses at most the row it
was writing; ``mode="resume"`` drops a torn last line and returns the finished keys.
``DirLock`` (a ``flock`` on ``<dir>/.harness.lock``) stops a second writer of the same
directory with a message naming the holder; the kernel drops the lock if the holder dies.
"""

from __future__ import annotations

import csv
import os
import socket
import sys
import time
from pathlib import Path

from ..errors import StoreLockedError
from .schema import ResultRow, SchemaError, column_names
from .store import RunMeta, parse_csv_text, row_cells, write_meta

try:
    import fcntl
except ModuleNotFoundError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".harness.lock"
WRITE_MODES = ("new", "resume", "overwrite")


class DirLock:
    """An exclusive, non-blocking lock on one directory (context manager).

    The lock file holds the holder's pid, host, start time and command line, for the
    message a second writer gets; it is removed on release.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> DirLock:
        if fcntl is None:  # pragma: no cover
            raise StoreLockedError("file locking needs a POSIX system (fcntl)")
        if self._fd is not None:
            raise StoreLockedError(f"{self.path}: already held by this object")
        self.directory.mkdir(parents=True, exist_ok=True)
        for _ in range(20):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise StoreLockedError(
                    f"{self.directory} is being written by another harness process ({holder}); "
                    f"wait for it to finish (lock file {self.path})"
                ) from None
            try:  # the file may have been unlinked by a releasing holder after our open
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                info = (f"pid {os.getpid()} on {socket.gethostname()} since "
                        f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(sys.argv)[:200]}")
                os.write(fd, info.encode())
                os.fsync(fd)
                self._fd = fd
                return self
            os.close(fd)
        raise StoreLockedError(f"{self.path}: could not take the lock (it kept changing)")

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 400).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "holder unknown"


def _drop_torn_tail(path: Path) -> bool:
    """Truncate an incomplete last line (a row cut by a crash). True if it dropped one."""
    with open(path, "rb+") as fh:
        data = fh.read()
        if not data or data.endswith(b"\n"):
            return False
        fh.truncate(data.rfind(b"\n") + 1)
        fh.flush()
        os.fsync(fh.fileno())
    return True


class RowWriter:
    """Append ``ResultRow``s to one result CSV, each on disk before ``write`` returns.

    ``mode``: ``"new"`` refuses an existing non-empty CSV; ``"resume"`` keeps its rows
    (validated; a torn last line is dropped) and exposes their keys as ``done_keys``;
    ``"overwrite"`` starts the file again. ``meta`` (if given) is written atomically
    beside the CSV as ``<matrix>.json`` when the writer opens. Holds ``DirLock`` on the
    CSV's directory while open.
    """

    def __init__(self, csv_path: str | Path, meta: RunMeta | None = None,
                 mode: str = "new") -> None:
        if mode not in WRITE_MODES:
            raise ValueError(f"RowWriter mode {mode!r} is not one of {', '.join(WRITE_MODES)}")
        self.path = Path(csv_path)
        self.meta = meta
        self.mode = mode
        self.lock = DirLock(self.path.parent)
        self.existing: tuple[ResultRow, ...] = ()
        self.dropped_torn_line = False
        self._done: set[tuple[str, str, str]] = set()
        self._fh = None
        self._writer = None

    @property
    def done_keys(self) -> frozenset[tuple[str, str, str]]:
        """(case_id, path, mode) of every row already in the file."""
        return frozenset(self._done)

    def open(self) -> RowWriter:
        self.lock.acquire()
        try:
            self._open_locked()
        except BaseException:
            self.lock.release()
            raise
        return self

    def _open_locked(self) -> None:
        exists = self.path.is_file() and self.path.stat().st_size > 0
        if exists and self.mode == "new":
            raise FileExistsError(
                f"{self.path} already holds results; resume it or choose another output directory"
            )
        header_ok = False
        if exists and self.mode == "resume":
            self.dropped_torn_line = _drop_torn_tail(self.path)
            text = self.path.read_text(encoding="utf-8")
            header_ok = bool(text.strip())
            if header_ok:
                self.existing = tuple(parse_csv_text(text, str(self.path)))
                if list(next(csv.reader([text.splitlines()[0]]))) != column_names():
                    raise SchemaError(f"{self.path}: header differs from this harness's columns; "
                                      "cannot resume")
                self._done = {r.key for r in self.existing}
        if self.meta is not None:
            write_meta(self.path.with_suffix(".json"), self.meta)
        self._fh = open(self.path, "a" if header_ok else "w", encoding="utf-8", newline="")
        self._writer = csv.writer(self._fh, lineterminator="\n")
        if not header_ok:
            self._writer.writerow(column_names())
            self._sync()

    def _sync(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def write(self, row: ResultRow) -> None:
        """Append ``row`` and fsync. A key already written raises ValueError."""
        if self._writer is None:
            raise RuntimeError(f"RowWriter for {self.path} is not open")
        if not isinstance(row, ResultRow):
            raise TypeError(f"RowWriter.write needs a ResultRow, got {type(row).__name__}")
        if row.key in self._done:
            raise ValueError(f"{self.path}: row {row.key} was already written")
        if self.meta is not None and row.matrix != self.meta.matrix:
            raise ValueError(f"{self.path}: row matrix {row.matrix!r} is not {self.meta.matrix!r}")
        self._writer.writerow(row_cells(row))
        self._sync()
        self._done.add(row.key)

    def reorder(self, sort_key) -> None:
        """Rewrite the file with its rows sorted by ``sort_key(row)`` (stable: rows of one
        key keep their file order), atomically (a temporary file fsynced, then renamed),
        and keep appending. A sharded run writes rows as its devices finish them and puts
        them in the single-device order (the matrix's case order) at the end."""
        if self._writer is None:
            raise RuntimeError(f"RowWriter for {self.path} is not open")
        self._sync()
        rows = parse_csv_text(self.path.read_text(encoding="utf-8"), str(self.path))
        rows.sort(key=sort_key)
        tmp = self.path.with_name(f".{self.path.name}.reorder")
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            out = csv.writer(fh, lineterminator="\n")
            out.writerow(column_names())
            out.writerows(row_cells(r) for r in rows)
            fh.flush()
            os.fsync(fh.fileno())
        self._fh.close()
        os.replace(tmp, self.path)
        self._fh = open(self.path, "a", encoding="utf-8", newline="")
        self._writer = csv.writer(self._fh, lineterminator="\n")

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = self._writer = None
        self.lock.release()

    def __enter__(self) -> RowWriter:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


#: What a resumed run must share with the stored one (the json's extra keys), besides the
#: matrix and every setting: rows measured otherwise would be mixed into one CSV.
RESUME_KEYS = ("modes", "paths", "filter", "plugins", "cpu_threads")


def resume_difference(stored: RunMeta, now: RunMeta) -> str | None:
    """None when ``now`` may continue ``stored``; else what differs, in words."""
    if stored.matrix != now.matrix:
        return f"matrix {stored.matrix}, now {now.matrix}"
    old, new = dict(stored.settings), dict(now.settings)
    for key in ["preset", *sorted(set(old) | set(new))]:
        if key in ("source", "overrides"):
            continue
        if key in old and key in new and old[key] != new[key]:
            return f"setting {key} = {old[key]}, now {new[key]}"
    for key in RESUME_KEYS:
        a, b = stored.extra.get(key), now.extra.get(key)
        if a is not None and b is not None and a != b:
            return f"{key} {a}, now {b}"
    return None
