"""The directory a run writes into: never a system directory, never someone else's files.

A run (``fabric-emu run``, a sweep, ``fabric-emu compare``, ``emulator.run``)
writes into a directory that is new, or that holds only an earlier run of
ours -- as build tools treat their output directories. ``OutputDir`` is that
directory, the one type that creates, checks, clears and records it:

* where: the path is resolved (symlinks followed) and refused, in one line
  (``OutputError``, exit status 2), when it is or lies in a system tree
  (``SYSTEM_TREES``: /etc, /usr, /proc, /var but /var/tmp, ...), when it is
  a directory that holds others' (``NOT_ITSELF``: /, /home, /tmp, the
  user's home, ...), lies under a regular file, or cannot be written (a
  read-only mount, no permission).
* whose: the run writes a marker, ``.fabric-emu-run`` (JSON: what created
  it, and when it is closed the manifest of every entry the run created,
  ``entries``). Anything in the directory that an earlier marker does not
  name is someone else's: the directory is refused, in one line naming
  those entries, unless ``force`` (``--force``) -- and even then they are
  never deleted, moved or overwritten: a run that would write an entry of
  the same name refuses before it starts (``claim``).
* clearing: the earlier run's entries, and only those, are removed when
  the directory is opened (its raw logs would read as this run's); a user's
  ``notes.txt`` beside them, or in ``run/``, stays.
* nested and killed runs: ``docs/design-notes.md``, "Output directories".
"""
from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import os
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterator

from emulator import __version__
from emulator.atomic import atomic_write_text, is_temp_name
from emulator.errors import OutputError, WriteFailed
from emulator.rundir import RunDir

MARKER = RunDir.MARKER
MARKER_MAX_BYTES = 16 << 20     # a manifest lists entries; past this it is not one of ours
# Trees of the system: a run never writes in them (/var/tmp is a place for users' files).
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
                "/run", "/sbin", "/sys", "/usr", "/var")
SYSTEM_TREE_EXCEPTIONS = ("/var/tmp",)
# Directories that hold others' directories: a run may write below, never in them.
NOT_ITSELF = ("/", "/home", "/root", "/tmp", "/var/tmp", "/mnt", "/media", "/opt", "/srv")
LISTED_FOREIGN = 3              # entries a refusal names


def system_refusal(path: Path) -> str | None:
    """Why a resolved ``path`` is no place for a run's output, or None."""
    p = PurePosixPath(path)
    for tree in SYSTEM_TREES:
        if (p == PurePosixPath(tree) or PurePosixPath(tree) in p.parents) and not any(
                p == PurePosixPath(ok) or PurePosixPath(ok) in p.parents
                for ok in SYSTEM_TREE_EXCEPTIONS):
            return f"in {tree}, a system directory: a run never writes there"
    home = Path(os.path.expanduser("~"))
    if str(p) in NOT_ITSELF or p == PurePosixPath(home) or p.parent == PurePosixPath("/home"):
        return "holds others' files and directories: a run writes below it, never in it"
    return None


def resolve_output_path(path: str | Path) -> Path:
    """``path`` absolute, its symlinks resolved, checked as a place to write a
    run (nothing created); ``OutputError`` saying why not."""
    given = Path(path)
    try:
        resolved = given.expanduser().resolve()
    except (OSError, RuntimeError) as e:      # a symlink loop
        raise OutputError(f"{given}: cannot be resolved: {getattr(e, 'strerror', None) or e}") \
            from None
    why = system_refusal(resolved)
    if why is not None:
        shown = f"{given} (resolves to {resolved})" if str(resolved) != str(given) else str(given)
        raise OutputError(f"{shown}: {why} (choose a directory of your own)")
    for p in (resolved, *resolved.parents):
        try:
            st = os.stat(p)
        except (FileNotFoundError, NotADirectoryError):     # the file is further up
            continue
        except OSError as e:
            raise OutputError(f"{given}: {p}: {e.strerror}") from None
        if not _is_dir_mode(st.st_mode):
            what = "is" if p == resolved else f"lies under {p}, which is"
            raise OutputError(f"{given}: {what} a file, not a directory")
        break
    return resolved


def _is_dir_mode(mode: int) -> bool:
    return stat.S_ISDIR(mode)


# ------------------------------------------------------------------ the marker

def read_marker(directory: Path) -> dict | None:
    """The marker of ``directory``: None if it has none; ``{"damaged": why}``
    if it is not one we wrote (too big, not JSON, paths outside the directory)."""
    path = directory / MARKER
    try:
        with open(path, "rb") as f:
            data = f.read(MARKER_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as e:
        return {"damaged": e.strerror or str(e)}
    if len(data) > MARKER_MAX_BYTES:
        return {"damaged": f"over {MARKER_MAX_BYTES:,} bytes"}
    try:
        marker = json.loads(data)
    except (ValueError, RecursionError):
        return {"damaged": "not JSON"}
    if not (isinstance(marker, dict) and marker.get("tool") == "fabric-emu"
            and marker.get("state") in ("open", "closed")
            and all(isinstance(marker.get(k), list) and all(_safe(e) for e in marker[k])
                    for k in ("entries", "foreign"))):
        return {"damaged": "not a fabric-emu marker"}
    return marker


def _safe(entry) -> bool:
    """A manifest entry: a relative path inside the directory."""
    if not isinstance(entry, str) or not entry or "\0" in entry or entry.startswith("/"):
        return False
    parts = entry.rstrip("/").split("/")
    return all(p not in ("", ".", "..") for p in parts)


@dataclass
class Survey:
    """A directory's entries by whose they are (relative POSIX paths)."""

    files: list[str] = field(default_factory=list)     # an earlier run's files (markers too)
    dirs: list[str] = field(default_factory=list)      # ... and directories
    foreign: list[str] = field(default_factory=list)   # anyone else's: never touched
    damaged: str | None = None                         # why the marker is not ours


def survey(directory: Path, prefix: str = "") -> Survey:
    """Whose each entry of ``directory`` is, by its marker (none: all others');
    nested output directories by their own markers."""
    out = Survey()
    marker = read_marker(directory)
    if marker is not None and "damaged" in marker:
        # not ours to remove: at the top, this run's marker replaces it (with
        # force); in a nested directory, it is someone else's file
        out.damaged = marker["damaged"]
        if prefix:
            out.foreign.append(prefix + MARKER)
        marker = None
    elif marker is not None:
        out.files.append(prefix + MARKER)
    listed = set(marker["entries"]) if marker and marker["state"] == "closed" else None
    before = set(marker["foreign"]) if marker else set()

    def ours(rel: str, key: str) -> bool:
        if marker is None:
            return False
        return key in listed if listed is not None else rel not in before

    def walk(d: Path, rel_dir: str) -> None:
        with os.scandir(d) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            rel = rel_dir + e.name
            if not rel_dir and e.name == MARKER:
                continue
            is_dir = e.is_dir(follow_symlinks=False)
            if is_temp_name(e.name) and e.is_file(follow_symlinks=False) and marker is not None:
                out.files.append(prefix + rel)    # a write of ours cut short
            elif not ours(rel, rel + "/" if is_dir else rel) or not (
                    is_dir or e.is_file(follow_symlinks=False)):
                out.foreign.append(prefix + rel)
            elif is_dir and (Path(e.path) / MARKER).exists():
                sub = survey(Path(e.path), prefix + rel + "/")     # a nested run's own
                out.files += sub.files
                out.dirs += sub.dirs + [prefix + rel]
                out.foreign += sub.foreign
            elif is_dir:
                walk(Path(e.path), rel + "/")
                out.dirs.append(prefix + rel)
            else:
                out.files.append(prefix + rel)
    walk(directory, "")
    return out


def manifest(directory: Path, foreign: set[str]) -> list[str]:
    """What ``directory`` holds that is not ``foreign`` (relative paths;
    directories end with "/"): a nested output directory is one entry, its
    content is its own marker's; temporary files are left out."""
    entries: list[str] = []

    def walk(d: Path, rel_dir: str) -> None:
        with os.scandir(d) as it:
            for e in sorted(it, key=lambda e: e.name):
                rel = rel_dir + e.name
                if (not rel_dir and e.name == MARKER) or rel in foreign or is_temp_name(e.name):
                    continue
                if e.is_dir(follow_symlinks=False):
                    entries.append(rel + "/")
                    if not (Path(e.path) / MARKER).exists():
                        walk(Path(e.path), rel + "/")
                else:
                    entries.append(rel)
    walk(directory, "")
    return entries


# ------------------------------------------------------------------ the directory

class OutputDir:
    """One run's (sweep's, comparison's) output directory; ``output_dir``
    opens it (or hands out the one already open), checked and cleared of
    the earlier run, and closes it with its manifest."""

    def __init__(self, path: str | Path, *, force: bool = False, what: str = "run",
                 force_hint: str = "--force"):
        self.given = Path(path)
        self.path = resolve_output_path(path)
        self.force, self.what, self.force_hint = force, what, force_hint
        self.foreign: set[str] = set()          # relative paths of others' entries
        self._created: list[Path] = []          # directories mkdir made, outermost first
        self._had_marker = False                # an earlier run's (or a damaged) marker

    def __repr__(self) -> str:
        return f"OutputDir({str(self.path)!r})"

    # -- opening
    def check(self) -> Survey:
        """Whether a run may write here, changing nothing: ``OutputError`` if
        not (another run has it open, others' entries without ``force``, not
        writable); the survey of what is there."""
        found = Survey()
        if self.path.is_dir():
            self._refuse_if_in_use()
            try:
                found = survey(self.path)
            except OSError as e:
                raise OutputError(f"{self.given}: cannot be read: {e.filename}: "
                                  f"{e.strerror}") from None
            if found.foreign and not self.force:
                raise OutputError(self._refusal(found))
        existing = next(p for p in (self.path, *self.path.parents) if p.exists())
        if not os.access(existing, os.W_OK | os.X_OK):
            raise OutputError(f"{self.given}: not writable: "
                              f"{os.strerror(_access_errno(existing))}")
        return found

    def open(self) -> "OutputDir":
        """Checked (``check``), created, marked as this run's, cleared of the
        earlier run's entries."""
        found = self.check()
        self._had_marker = MARKER in found.files
        self._mkdir()
        self.foreign = set(found.foreign)
        # cleared first: on a full disk the earlier run's space is what the
        # marker needs (its own marker stays until this one replaces it)
        self._clear(found)
        try:
            self._write_marker("open")
        except WriteFailed as e:
            self._undo_mkdir()
            raise OutputError(f"{self.given}: not writable: "
                              f"{e.oserror.strerror if e.oserror else e}") from None
        return self

    def _refuse_if_in_use(self) -> None:
        """A marker still open by a live process: another run writes here now."""
        marker = read_marker(self.path)
        if not marker or marker.get("state") != "open" or marker.get("pid") == os.getpid():
            return
        pid, started = marker.get("pid"), marker.get("pid_start")
        if isinstance(pid, int) and started is not None and process_start(pid) == started:
            raise OutputError(f"{self.given}: in use by a run still going (pid {pid}: "
                              f"{marker.get('command', '?')}): wait for it, or choose another "
                              f"directory")

    def _refusal(self, found: Survey) -> str:
        n = len(found.foreign)
        names = ", ".join(found.foreign[:LISTED_FOREIGN]) + (", ..." if n > LISTED_FOREIGN else "")
        if found.damaged:
            why = f"its {MARKER} is damaged: {found.damaged}"
        elif (self.path / MARKER).exists():
            why = f"its {MARKER} does not name them"
        else:
            why = f"no {MARKER} marker: not a fabric-emu output directory"
        return (f"{self.given}: holds {n} entr{'y' if n == 1 else 'ies'} of someone else's "
                f"({names}; {why}): choose a new directory, or {self.force_hint} to write "
                f"there anyway (they are kept)")

    def _mkdir(self) -> None:
        missing = [p for p in (self.path, *self.path.parents) if not p.exists()][::-1]
        for p in missing:
            try:
                p.mkdir()
            except FileExistsError:
                continue
            except OSError as e:
                self._undo_mkdir()
                raise OutputError(f"{self.given}: cannot create {p}: {e.strerror}") from None
            self._created.append(p)

    def _undo_mkdir(self) -> None:
        for p in reversed(self._created):
            with contextlib.suppress(OSError):
                p.rmdir()
        self._created.clear()

    def _clear(self, found: Survey) -> None:
        """The earlier run's entries go (files, then its directories left
        empty, deepest first); the marker is this run's now."""
        try:
            for rel in found.files:
                if rel != MARKER:
                    with contextlib.suppress(FileNotFoundError):
                        (self.path / rel).unlink()
            for rel in sorted(found.dirs, key=lambda r: r.count("/"), reverse=True):
                with contextlib.suppress(OSError):
                    (self.path / rel).rmdir()     # not empty: others' files in it stay
        except OSError as e:
            raise OutputError(f"{self.given}: cannot clear the earlier run: {e.filename}: "
                              f"{e.strerror}") from None

    # -- during the run
    def claim(self, *patterns: str) -> None:
        """Refuse, before anything is written, when this run would write an
        entry (a name, or an ``fnmatch`` pattern) that someone else's holds."""
        top = sorted(r for r in self.foreign if "/" not in r)
        taken = [n for n in top if any(n == p or fnmatch.fnmatchcase(n, p) for p in patterns)]
        if taken:
            raise OutputError(f"{self.given / taken[0]}: not fabric-emu's (it was there before "
                              f"this run) and the run writes an entry of that name: move it, "
                              f"or choose another directory")

    def remove(self, name: str) -> None:
        """An entry this run created gone, with what it holds but others'
        entries (kept, and their directories with them)."""
        if name in self.foreign or "/" in name or name == MARKER:
            raise OutputError(f"{self.given / name}: not this run's: not removed")
        p = self.path / name
        if not p.is_dir() or p.is_symlink():
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
            return
        for root, dirs, files in os.walk(p, topdown=False):     # symlinks are not followed
            for n in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
                full = os.path.join(root, n)
                if os.path.relpath(full, self.path) not in self.foreign:
                    os.unlink(full)
            for d in dirs:
                with contextlib.suppress(OSError):      # not empty: others' entries in it
                    os.rmdir(os.path.join(root, d))
        with contextlib.suppress(OSError):
            p.rmdir()

    def set_aside(self, name: str, keep: tuple[str, ...] = ()) -> Path:
        """The entries this run created (but those matching ``keep``) moved
        into a new directory ``name`` of it: the next run here starts from
        none of them. Others' entries stay where they are."""
        self.claim(name)
        dest = self.path / name
        if dest.exists():
            self.remove(name)
        dest.mkdir()
        skip = {MARKER, name}
        self._move_ours(self.path, dest, "", lambda n: n in skip or any(
            fnmatch.fnmatchcase(n, k) for k in keep))
        return dest

    def _move_ours(self, src: Path, dst: Path, rel_dir: str, skip=lambda n: False) -> None:
        """``src``'s entries moved into ``dst`` but others' (a directory
        holding others' entries is moved entry by entry, theirs left)."""
        for p in sorted(src.iterdir()):
            rel = rel_dir + p.name
            if skip(p.name) or rel in self.foreign or is_temp_name(p.name):
                continue
            if p.is_dir() and not p.is_symlink() and any(
                    f.startswith(rel + "/") for f in self.foreign):
                (dst / p.name).mkdir(exist_ok=True)
                self._move_ours(p, dst / p.name, rel + "/")
            else:
                os.replace(p, dst / p.name)

    # -- closing
    def close(self) -> None:
        """The manifest written into the marker; a directory this run created
        and left empty is removed, with the parents it created."""
        if not self.path.is_dir():
            return
        entries = manifest(self.path, self.foreign)
        if not entries and not self._had_marker:
            with contextlib.suppress(FileNotFoundError):
                (self.path / MARKER).unlink()
            self._undo_mkdir()
            return
        try:
            self._write_marker("closed", entries)
        except WriteFailed:
            # a full disk: the marker stays "open", which still names the
            # others' entries (all else is taken as this run's)
            pass

    def _write_marker(self, state: str, entries: list[str] | None = None) -> None:
        atomic_write_text(self.path / MARKER, json.dumps({
            "tool": "fabric-emu", "version": __version__, "what": self.what, "state": state,
            "pid": os.getpid(), "pid_start": process_start(os.getpid()),
            "written_unix": round(time.time(), 3),
            "command": " ".join(sys.argv)[:2000],
            "foreign": sorted(self.foreign), "entries": entries or []}, indent=1) + "\n")


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), None if there is
    none: with the pid, it names a process (pids are reused)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
        return int(stat_line[stat_line.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _access_errno(path: Path) -> int:
    """Why ``os.access`` said no: EROFS on a read-only mount, else EACCES."""
    with contextlib.suppress(OSError):
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return errno.EROFS
    return errno.EACCES


def write_entry(directory: str | Path, name: str, write) -> Path:
    """An entry added to a finished run's directory (its ``report.html``):
    refused (``OutputError``) if ``name`` there is not the run's, else
    ``write(path)``, then recorded in the closed marker's manifest."""
    directory, marker = Path(directory), read_marker(Path(directory))
    path, ok = directory / name, marker is not None and "damaged" not in marker
    if path.exists() and not (ok and (name in marker["entries"] if marker["state"] == "closed"
                                      else name not in marker["foreign"])):
        raise OutputError(f"{path}: not the run's (its {MARKER} does not name it): "
                          "kept; move it away to write the run's")
    write(path)
    if ok and marker["state"] == "closed" and name not in marker["entries"]:
        atomic_write_text(directory / MARKER, json.dumps(
            {**marker, "entries": sorted([*marker["entries"], name])}, indent=1) + "\n")
    return path


# ------------------------------------------------------------------ open ones

_OPEN: dict[Path, OutputDir] = {}     # by resolved path: the directories this process has open


@contextlib.contextmanager
def output_dir(path: str | Path, *, force: bool = False, what: str = "run",
               force_hint: str = "--force") -> Iterator[OutputDir]:
    """The output directory at ``path``: the one this process has open there
    (a run inside a sweep, a rerun), else opened now -- inside an open one,
    as a nested run it claims its first component -- and closed when the
    block ends, however it ends."""
    resolved = resolve_output_path(path)
    if resolved in _OPEN:
        yield _OPEN[resolved]
        return
    for parent, odir in _OPEN.items():
        if parent in resolved.parents:
            odir.claim(resolved.relative_to(parent).parts[0])
    odir = OutputDir(path, force=force, what=what, force_hint=force_hint).open()
    _OPEN[resolved] = odir
    try:
        yield odir
    finally:
        del _OPEN[resolved]
        odir.close()


__all__ = ["MARKER", "NOT_ITSELF", "OutputDir", "SYSTEM_TREES", "manifest", "output_dir",
           "read_marker", "resolve_output_path", "survey", "system_refusal", "write_entry"]
