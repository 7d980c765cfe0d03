"""Result files written whole or not at all.

Every file a run leaves for the user (``summary.json``, the CSVs, the HPCC
files, the plots, captures, ``sweep.csv``, the comparison) is written to a
temporary name beside it and renamed over it (``os.replace``, atomic within
a directory): a reader sees the earlier file or the new one, never an empty
or cut-short one. A write that fails -- the disk full (ENOSPC), no
permission (EACCES), a read-only file system (EROFS) -- removes its
temporary file, leaves the earlier file as it was, and raises ``WriteFailed``:
one line naming the file, how many bytes and why.

The data is flushed to the disk (``fsync``) before the rename, so that a
crash of the machine cannot leave the new name with no data behind it.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO, Iterator

from emulator.errors import WriteFailed

TMP_INFIX = ".tmp-"         # ``.<name>.tmp-<pid>``: hidden, and never a result's own name


def temp_path(path: Path) -> Path:
    """Where ``path``'s new content is written before the rename: its directory
    (a rename across file systems would be a copy), a hidden name of this
    process's own."""
    return path.with_name(f".{path.name}{TMP_INFIX}{os.getpid()}")


def is_temp_name(name: str) -> bool:
    """Whether a directory entry is a temporary file of ``atomic_open``."""
    return name.startswith(".") and TMP_INFIX in name


def _failed(path: Path, nbytes: int, err: OSError, whole: bool) -> WriteFailed:
    kept = "the earlier file is kept" if path.exists() else "no file was left in its place"
    size = f"{nbytes:,} bytes" if whole else f"failed after {nbytes:,} bytes"
    return WriteFailed(f"{path}: not written ({size}): {err.strerror or err}; {kept}", err)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", *, size_bytes: int | None = None,
                **kwargs) -> Iterator[IO]:
    """A file to write ``path``'s new content into (``mode`` "w" or "wb",
    ``kwargs`` as ``open``'s): renamed over ``path`` when the block ends
    without an exception; removed, ``path`` untouched, when it raises. An
    ``OSError`` of the writing becomes ``WriteFailed`` (its size: ``size_bytes``,
    the whole content's, where known; else what was written before it failed)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode {mode!r} (expected 'w' or 'wb')")
    path = Path(path)
    tmp = temp_path(path)
    try:
        with open(tmp, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        written = _temp_size(tmp)
        _remove(tmp)
        raise _failed(path, written if size_bytes is None else size_bytes, e,
                      whole=size_bytes is not None) from None
    except BaseException:
        _remove(tmp)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """``path`` holding ``data``, or as it was (``WriteFailed`` saying why)."""
    with atomic_open(path, "wb", size_bytes=len(data)) as f:
        f.write(data)
    return Path(path)


def atomic_write_text(path: str | Path, text: str) -> Path:
    """``path`` holding ``text`` (UTF-8), or as it was (``WriteFailed`` saying why)."""
    return atomic_write_bytes(path, text.encode())


def atomic_savefig(fig, path: str | Path, **kwargs) -> Path:
    """A matplotlib figure saved to ``path`` as ``atomic_open`` writes (the
    format from the suffix, unless ``format`` is given)."""
    path = Path(path)
    kwargs.setdefault("format", path.suffix.lstrip(".") or "png")
    with atomic_open(path, "wb") as f:
        fig.savefig(f, **kwargs)
    return path


def _temp_size(tmp: Path) -> int:
    try:
        return tmp.stat().st_size
    except OSError:
        return 0


def _remove(tmp: Path) -> None:
    try:
        tmp.unlink()
    except OSError:      # never created (a read-only file system, no permission)
        pass


__all__ = ["atomic_open", "atomic_savefig", "atomic_write_bytes", "atomic_write_text",
           "is_temp_name", "temp_path"]
