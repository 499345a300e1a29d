"""Run folders under reports/: never silently overwritten, every file written atomically."""

from __future__ import annotations

import atexit
import contextlib
import functools
import glob
import io
import json
import os
import re
import shutil
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from layerprobe.errors import RunError, article, first_line
from layerprobe.files import FILE_MODE, PARTIAL_MARK, publishing, temp_file

T = TypeVar("T")


def slug(text: str) -> str:
    """A folder-safe name for a model spec: 'meta-llama/Llama-2-7b-hf' -> 'meta-llama--Llama-2-7b-hf'."""
    name = text.rstrip("/\\")
    if name.startswith((os.sep, ".", "~")) or (os.sep in name and os.path.exists(name)):  # a local path: its name
        name = Path(name).name or "model"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name.replace("/", "--")).strip("-") or "model"


def model_label(spec: str) -> str:
    """How a model is named in titles and labels: a local path by its last part ('/data/ckpt/llama-7b' ->
    'llama-7b'), a hub id or an embedded name as written. The full path stays in summary.json and manifest.json."""
    text = str(spec).rstrip("/\\")
    if os.sep in text and (text.startswith((os.sep, ".", "~")) or os.path.exists(text)):
        return Path(text).name or text
    return text


LOCK = ".layerprobe.lock"  # in a run folder while a process writes it: "pid@host"; gone once the run is finished
# The lock's later lines say whose folder it is: "command <name>", then "file <path>" for every file written there
# (the record --overwrite and --resume trust, with manifest.json's "files" once the run is finished).
_held: dict[Path, set[str]] = {}  # claimed run folder -> the files its lock names


def _owner(lock: Path) -> str | None:
    """'pid@host' of a live process holding the lock, None when the lock is stale (its process is gone)."""
    import socket

    try:
        text = (lock.read_text().splitlines() or [""])[0].strip()
        pid, _, host = text.partition("@")
        if not pid.isdigit() or not host:
            return None  # ABANDONED, or unreadable: no process holds it
        if host != socket.gethostname():
            return text  # another machine's process: assume alive
        os.kill(int(pid), 0)
        return text
    except (OSError, ValueError):
        return None


def _claim(path: Path, command: str | None, files: list[str]) -> bool:
    """Take the folder's lock (take_lock) for `command`, naming the layerprobe files already there; a stale lock is
    taken over. False: a live process holds it."""
    record = ([f"command {command}"] if command else []) + [f"file {name}" for name in files]
    if take_lock(path / LOCK, record):
        _held[path] = set(files)
        return True
    return False


def _relative(path: Path, folder: Path) -> str | None:
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(folder)).as_posix()
    except ValueError:
        return None


def note_written(path: Path) -> None:
    """`path` is about to be written: named in the lock of every claimed run folder holding it (before the write,
    so a kill never leaves a file of ours its record lacks)."""
    for folder, named in list(_held.items()):
        name = _relative(path, folder)
        if name is None or name in named or _ours_hidden(name):
            continue
        with contextlib.suppress(OSError):
            with open(folder / LOCK, "a", encoding="utf-8") as handle:
                handle.write(f"file {name}\n")
            named.add(name)


def _ours_hidden(name: str) -> bool:
    """A lock, a temp file or a private sibling folder that layerprobe makes and removes (never a run's output)."""
    return any(part == LOCK or (part.startswith(".") and (part.endswith(".tmp") or ".partial-" in part
                                                          or ".old-" in part or part.endswith(LOCK)))
               for part in name.split("/"))


def _head(path: Path) -> str:
    """A file's first 4 kB as text ('' where it cannot be read): what writers' signatures are recognised by."""
    try:
        with open(path, "rb") as handle:
            return handle.read(4096).decode("utf-8", "replace")
    except OSError:
        return ""


REPORT_PAGES = ("report.html", "report.md")


def is_report_page(head: str) -> bool:
    """report.html or report.md as `report` writes them (its first 4 kB): every title starts 'layerprobe report'."""
    return head.startswith("# layerprobe report") or "<title>layerprobe report" in head


def report_files(folder: Path) -> set[str]:
    """A report `report --out RUN` wrote into a run folder: its pages (by their title) and report_files/ beside them.
    They are layerprobe's but not the run's: never listed in the run's manifest, kept by its --overwrite."""
    pages = set()
    for name in REPORT_PAGES:
        if (folder / name).is_file() and not (folder / name).is_symlink() and is_report_page(_head(folder / name)):
            pages.add(name)
    assets = folder / "report_files"
    if pages and assets.is_dir():
        pages |= {p.relative_to(folder).as_posix() for p in assets.rglob("*") if p.is_file() or p.is_symlink()}
    return pages


def run_files(folder: Path, report: bool = True) -> list[str]:
    """Every file under `folder`, as posix paths relative to it, but layerprobe's locks and temp files; sorted.
    `report` False: a report written into the run (report_files) left out too, as not the run's."""
    found = []
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if (path.is_file() or path.is_symlink()) and not _ours_hidden(name):
            found.append(name)
    if report:
        return found
    pages = report_files(folder)  # once: it reads each page's head
    return [name for name in found if name not in pages]


def _lock_record(lock: Path) -> tuple[str | None, set[str]]:
    """(the command a run folder's lock names or None, the files it names)."""
    command, files = None, set()
    with contextlib.suppress(OSError, UnicodeDecodeError):
        for line in lock.read_text(encoding="utf-8").splitlines()[1:]:
            kind, _, value = line.partition(" ")
            if kind == "command":
                command = value.strip()
            elif kind == "file":
                files.add(value.rstrip("\n"))
    return command, files


def _older_run_agrees(folder: Path, manifest: dict) -> bool:
    """A manifest.json without "files" (written before layerprobe listed them, as the committed reports/ runs) is a
    record only when it is one: a layerprobe manifest (version, start time) beside a summary.json of the same
    command that agrees with it on every value both hold (model, weights, tokens, ...), at least one besides the
    command."""
    if not {"layerprobe_version", "started"} <= set(manifest):
        return False
    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    if not isinstance(summary, dict):
        return False
    shared = [k for k, v in manifest.items() if k in summary and not isinstance(v, (dict, list))]
    return "command" in shared and len(shared) >= 2 and all(manifest[k] == summary[k] for k in shared)


def written_by(folder: Path) -> tuple[str | None, set[str] | None]:
    """(the command that wrote a run folder, the files it wrote) from its lock (a running or unfinished run: the
    lock names both) and its manifest.json (a finished run: "command" and "files"). Files None: not recorded (an
    older layerprobe's run). ('', None): an older layerprobe's lock, which names no command. (None, None): no
    record at all, not a layerprobe run folder."""
    command, files = None, None
    try:
        data = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("command"), str):
        command, listed = data["command"], data.get("files")
        files = {str(f) for f in listed} | {"manifest.json"} if isinstance(listed, list) else None
        if files is None and not _older_run_agrees(folder, data):
            command = None  # a manifest.json anyone could write ({"command": "angular"}): not a record
    if (folder / LOCK).is_file():
        locked, named = _lock_record(folder / LOCK)
        if locked is None:
            return command or "", None
        return locked, named | (files if command == locked and files else set())
    return command, files


def name_of(command: Any) -> str | None:
    """A command's name: its record's (commands.Command), or the name itself where only a manifest's is at hand."""
    return getattr(command, "name", command)


def check_owned(folder: Path, command: Any, flag: str) -> None:
    """`flag` (--overwrite or --resume) acts only on a folder layerprobe wrote for `command` (its record, or a
    manifest's name): an empty one, or one whose record (lock, manifest.json) names the command and every file in
    it. Anything else is a one-line error naming a file layerprobe did not write; nothing is touched."""
    command = name_of(command)
    if not folder.is_dir():
        return
    try:
        present = run_files(folder, report=False)
    except OSError as exc:
        raise RunError(f"{flag}: '{folder}' cannot be read ({exc.strerror or first_line(exc)}): pass a folder you can "
                       "read and write.") from None
    made, files = written_by(folder)
    if not present and made is not None:
        return  # empty, or a run killed before it saved anything
    if not present and flag != "--resume":
        return
    if made is None:
        what = next((f"'{n}'" for n in present if n != "manifest.json"), f"'{present[0]}'" if present else "nothing")
        record = ("its manifest.json lists no files and no summary.json of the same run agrees with it" if
                  "manifest.json" in present else "no manifest.json or lock of one")
        raise RunError(f"{flag}: '{folder}' is not a layerprobe {command} run ({record}; it holds {what}): "
                       "layerprobe never replaces files it did not write; pass another --out.")
    if made and made != command:
        raise RunError(f"{flag}: '{folder}' holds {article(made)} {made} run, not {article(command)} {command} run: "
                       f"pass the --out of {article(command)} {command} run, or another --out.")
    foreign = [name for name in present if files is not None and name not in files]
    if flag == "--overwrite":
        foreign += unmarked_partials(folder)
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise RunError(f"{flag}: '{folder}' holds '{foreign[0]}'{more}, which layerprobe did not write: move it away "
                       "or pass another --out; layerprobe never replaces files it did not write.")


def check_out_apart(out: str | Path, inputs: dict[str, Any], may_be: bool = False) -> None:
    """A command never writes where it reads: --out (resolved, through any symbolic link) is none of `inputs` (what
    the message calls it -> a path, None skipped), not inside one, and holds none (with --overwrite it would be
    replaced). `may_be`: --out may be an input itself (report writes its page into a run it reads), not inside it."""
    target = Path(out).expanduser().resolve()
    for what, path in inputs.items():
        if path is None or not Path(path).expanduser().exists():
            continue
        source = Path(path).expanduser().resolve()
        if target == source and may_be:
            continue
        relation = ("is" if target == source else "is inside" if source in target.parents else
                    "holds" if target in source.parents and not may_be else None)
        if relation:
            raise RunError(f"--out '{out}' {relation} {what} '{path}' (resolved: '{source}'): a command never "
                           "writes where it reads; pass another --out.")


def enclosing_run(path: str | Path) -> Path | None:
    """The layerprobe run folder `path` lies inside (a parent holding summary.json and manifest.json, or a run's
    lock), or None: an export written there would replace part of that run (a heal run's merged/)."""
    for parent in Path(path).expanduser().resolve().parents:
        if ((parent / "summary.json").is_file() and (parent / "manifest.json").is_file()) or (parent / LOCK).is_file():
            return parent
    return None


def check_not_in_run(out: str | Path, option: str, is_ours: Callable[[str], bool]) -> None:
    """A file a command writes beside runs (compare's verdict) never goes inside a layerprobe run folder: it would
    replace one of that run's files (its summary.json) or add one its record does not list. An earlier file of the
    same writer there (is_ours(its first 4 kB)) may be replaced."""
    run = enclosing_run(out)
    if run is None:
        return
    path = Path(out).expanduser()
    head = _head(path) if path.is_file() else ""
    if head and is_ours(head):
        return
    raise RunError(f"{option} '{out}' lies inside the layerprobe run '{run}': it would "
                   + ("replace one of that run's files" if path.exists() else "add a file its record does not list")
                   + f"; pass a path outside run folders (e.g. '{run.parent / 'verdict.txt'}').")


def run_folder_note(path: Path) -> str | None:
    """"'x' is a heal run folder, not a model: its checkpoint is 'x/merged'" for a layerprobe run folder given as
    MODEL (None for any other path): model loading and heal say it instead of "no config.json"."""
    try:
        summary = json.loads((path / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(summary, dict) or not (path / "manifest.json").is_file():
        return None
    merged = path / "merged"
    return (f"'{path}' is a {summary.get('command') or 'layerprobe'} run folder, not a model"
            + (f": its checkpoint is '{merged}'" if (merged / "config.json").is_file() else ""))


def clear_replaced(folder: Path, files: set[str]) -> None:
    """--overwrite: every file the replaced run listed (its manifest's "files", or its lock's), and only those, is
    removed before the new run writes, with the folders that leaves empty inside `folder`; a listed name outside
    `folder` (a record edited by hand: '../x') is never touched."""
    root = folder.resolve()
    for name in sorted(files):
        target = folder / name
        if name == LOCK or root not in target.resolve().parents or not (target.is_file() or target.is_symlink()):
            continue
        target.unlink()
        parent = target.parent
        while parent.resolve() != root and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent


def clear_leftovers(folder: Path) -> None:
    """The leftovers of layerprobe's own writes in a run folder this process holds, removed: one rule for --overwrite
    (they go with the run they belong to) and --resume (a write cut short is never read). Ours: a '.x.partial-*'
    folder with the mark files.publishing puts beside it (and the mark), a '.x.*.tmp' file; a contender's lock
    ('.layerprobe.lock.*.tmp', being taken now) stays, and a '.partial-' folder without its mark is not ours
    (--overwrite refuses it: unmarked_partials)."""
    for leftover in sorted(folder.rglob(".*"), key=lambda p: len(p.parts)):
        name = leftover.name
        mark = leftover.with_name(name + PARTIAL_MARK)
        if ".partial-" in name and leftover.is_dir() and not leftover.is_symlink() and mark.is_file():
            shutil.rmtree(leftover, ignore_errors=True)
            mark.unlink(missing_ok=True)
        elif name.endswith(".tmp") and not name.startswith(LOCK + ".") and leftover.is_file():
            leftover.unlink(missing_ok=True)


def unmarked_partials(folder: Path) -> list[str]:
    """'.x.partial-*' entries under `folder` without the mark files.publishing writes beside its own: not
    layerprobe's, so --overwrite, which removes only what layerprobe wrote, refuses rather than leave them."""
    found = []
    for path in sorted(folder.rglob(".*.partial-*")):
        if path.name.endswith(PARTIAL_MARK) and path.with_name(path.name[:-len(PARTIAL_MARK)]).is_dir():
            continue  # the mark of a marked partial
        if not path.with_name(path.name + PARTIAL_MARK).is_file():
            found.append(path.relative_to(folder).as_posix())
    return found


def check_removable(folder: Path, files: set[str]) -> None:
    """--overwrite, before anything is claimed or removed: every file the replaced run lists can be removed (its
    folder writable), so a refusal leaves the old run whole, with no lock in it."""
    root = folder.resolve()
    for name in sorted(files):
        target = folder / name
        if name == LOCK or root not in target.resolve().parents or not (target.is_file() or target.is_symlink()):
            continue
        if not os.access(target.parent, os.W_OK | os.X_OK):
            raise RunError(f"--overwrite: '{target}' of the run it replaces cannot be removed (its folder "
                           f"'{target.parent}' is not writable): make it writable, or pass another --out; the run "
                           "there is left as it was.")


def _replaced(folder: Path, command: Any) -> set[str] | None:
    """What --overwrite removes: every file the replaced run lists (manifest.json's "files", or its lock's), and only
    those. A finished run of an older layerprobe lists none: its files cannot be told from ones added since, so it is
    refused rather than removed whole (a user's file would go) or written over (its leftovers, a curve's angular/,
    would be listed in the new manifest as the new run's). None: nothing to remove (no record)."""
    made, files = written_by(folder)
    name = name_of(command)
    if files is None and name is not None and made == name and not (folder / LOCK).is_file() and run_files(folder, report=False):
        raise RunError(f"--overwrite: '{folder}' is {article(name)} {name} run of an older layerprobe whose "
                       "manifest.json does not list its files, so they cannot be told from files added since: "
                       "remove the folder yourself (or move what you keep out of it), or pass another --out.")
    return files


def check_file_owned(path: Path, is_ours: Callable[[str], bool], option: str, overwrite: bool = False) -> None:
    """A file layerprobe writes at a path the user chose (report.html, compare --out): one already there is replaced
    only when it is layerprobe's (is_ours(its first 4 kB of text): the signature each writer puts in, or named by the
    record of the run folder holding it), or with --overwrite. Anything else is one line naming the file."""
    if overwrite or not (path.exists() or path.is_symlink()):
        return
    if path.is_dir():
        raise RunError(f"{option}: '{path}' is a folder, not a file: pass a file path.")
    head = _head(path)
    if is_ours(head) or path.name in (written_by(path.parent)[1] or ()):
        return
    raise RunError(f"'{path}' is already there and layerprobe did not write it: move it away, pass another {option}, "
                   "or pass --overwrite to replace it.")


@contextlib.contextmanager
def claimed(lock: Path, what: str) -> Iterator[None]:
    """One writer at a time for `what` (an export's --out), by a lock file beside it; a live holder is a one-line
    error, a stale lock (its process killed) is taken over; released on exit."""
    if not take_lock(lock):
        raise RunError(f"{what} is being written by another layerprobe process ({_owner(lock)}): wait for it, or "
                       "pass another --out.")
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def take_lock(lock: Path, record: list[str] | None = None) -> bool:
    """Create `lock` holding 'pid@host' atomically; a stale one is taken over. False: a live process holds it.

    Processes on one machine check and take a lock one at a time (an advisory flock on its folder), so of several
    claiming one lock, even a stale one, exactly one wins; the lock appears with its text in one step (a hard link
    to a written temp file), so no reader ever sees it empty."""
    import socket

    me = f"{os.getpid()}@{socket.gethostname()}"
    text = "\n".join([me, *(record or [])])
    tmp = temp_file(lock, (text + "\n").encode())
    try:
        with _one_at_a_time(lock.parent):
            for _ in range(2):
                try:
                    _create(tmp, lock, text)
                    return True
                except FileExistsError:
                    owner = _owner(lock)
                    if owner is not None and owner != me:
                        return False
                    lock.unlink(missing_ok=True)  # stale (its process was killed), or this process's own claim
            return False
    finally:
        tmp.unlink(missing_ok=True)


def _create(tmp: Path, lock: Path, text: str) -> None:
    """`lock` appears holding `text`: a hard link to the written `tmp`, or where the file system has no hard links
    (FAT, some network and FUSE mounts) an exclusive create and a write. FileExistsError: it exists."""
    import errno

    try:
        os.link(tmp, lock)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV, errno.EMLINK, errno.ENOENT):
            raise  # FileExistsError (EEXIST) among them
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(text + "\n")
        except BaseException:
            lock.unlink(missing_ok=True)  # never an empty lock left behind
            raise


@contextlib.contextmanager
def _one_at_a_time(folder: Path) -> Iterator[None]:
    """An exclusive advisory lock on `folder` for a moment; a no-op where the system has none (Windows, some
    network file systems)."""
    try:
        import fcntl

        fd = os.open(folder, os.O_RDONLY)
    except (ImportError, OSError):
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the flock


def release_run_dir(path: Path) -> None:
    """The run in `path` is finished (or abandoned by this process): drop its lock."""
    if path in _held:
        (path / LOCK).unlink(missing_ok=True)
        _held.pop(path, None)


ABANDONED = "unfinished"  # the lock's text once its run has stopped: the folder is unfinished and free to resume
_unfinished: list[Path] = []  # folders the current command left unfinished (emptied as the next command starts)
_depth = [0]  # commands running in this process (a demo's sub-runs are commands inside it)
_unstarted: list[Path] = []  # of those, the ones interrupted before any work was saved (only the lock in them)
_made: dict[Path, list[Path]] = {}  # run folder -> the parent folders claiming it created, deepest first


@atexit.register
def abandon_run_dirs(interrupted: bool = False) -> list[Path]:
    """An error or Ctrl-C ends the run. After an error a folder that got nothing is removed, with the parents that
    claiming it made while they stay empty (never a folder that was there before); one with partial work, and
    after Ctrl-C (`interrupted`) any, keeps its lock, rewritten to say no process holds it, as the mark of an
    unfinished run: --resume takes it over (with nothing saved, it starts from the start), and a fresh run with
    the same --out reuses a folder that holds nothing else. Returns every folder this process has left
    unfinished (those with nothing saved also in unstarted_run_dirs())."""
    for path in list(_held):
        _held.pop(path, None)
        try:
            empty = [p.name for p in path.iterdir()] == [LOCK]
            record = (path / LOCK).read_text(encoding="utf-8").splitlines()[1:]  # its command and files stay
            if empty and interrupted:
                (path / LOCK).write_text("\n".join([ABANDONED, *record]) + "\n", encoding="utf-8")
                _unfinished.append(path)
                _unstarted.append(path)
            elif empty:
                (path / LOCK).unlink(missing_ok=True)
                path.rmdir()
                for parent in _made.pop(path, []):  # only folders this process made, and only while empty
                    if parent.is_dir() and not any(parent.iterdir()):
                        parent.rmdir()
            else:
                (path / LOCK).write_text("\n".join([ABANDONED, *record]) + "\n", encoding="utf-8")
                _unfinished.append(path)
        except OSError:
            pass
    return [p for p in dict.fromkeys(_unfinished) if (p / LOCK).is_file()]  # not finished since (a resume)


def unstarted_run_dirs() -> list[Path]:
    """The folders this process left after Ctrl-C before saving any work (abandon_run_dirs)."""
    return [p for p in dict.fromkeys(_unstarted) if holds_nothing(p)]


def holds_nothing(path: Path) -> bool:
    """A folder with nothing but a lock no live process holds: a run interrupted before its first save."""
    try:
        return [p.name for p in path.iterdir()] == [LOCK] and _owner(path / LOCK) is None
    except OSError:
        return False


def abandons_on_error(command: Callable[..., T]) -> Callable[..., T]:
    """Decorate a command: if it raises (an error, Ctrl-C), the folders it claimed are abandoned (above), so the
    same process (a notebook) or another can resume them at once; either way, hooks its loads registered go."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> T:
        from layerprobe import scoped

        since = scoped.mark()
        if _depth[0] == 0:  # a new outermost command: an earlier one's leftovers are not its to report on Ctrl-C
            _unfinished.clear()
            _unstarted.clear()
        _depth[0] += 1
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt:
            abandon_run_dirs(interrupted=True)  # Ctrl-C: the folder stays for --resume, even with nothing saved
            raise
        except BaseException:
            abandon_run_dirs()
            raise
        finally:
            _depth[0] -= 1
            scoped.release(since)  # the hooks the command's loaded models carried (layerprobe/scoped.py)

    return run


def _sibling(out: str | Path) -> Path:
    path = Path(out)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    candidate, n = path.with_name(f"{path.name}-{stamp}"), 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}-{stamp}-{n}")
        n += 1
    return candidate


def _redirect(out: str | Path) -> Path:
    """A timestamped sibling for a run whose --out is taken, said at once (progress.notice): where the run goes,
    and why, so nobody looks for it in the folder they named."""
    from layerprobe.progress import notice

    sibling = _sibling(out)
    taken = Path(out)
    if (taken / LOCK).is_file():
        owner = _owner(taken / LOCK)
        what = (f"a run another process is writing ({owner})" if owner else
                "an unfinished run (interrupted: --resume / resume=True continues it where the command has one)")
    else:
        what = "a run" if (taken / "summary.json").is_file() else "other files"
    notice(f"'{out}' already holds {what}: this run writes to '{sibling}' instead (--overwrite / overwrite=True "
           "replaces a finished or interrupted run).")
    return sibling


def later_runs(folder: Path) -> list[Path]:
    """The timestamped siblings of `folder` (later runs sent beside it because it was taken) that hold a run."""
    if not folder.parent.is_dir():
        return []
    return sorted(p for p in folder.parent.glob(f"{glob.escape(folder.name)}-*")
                  if p.is_dir() and re.fullmatch(r"\d{8}-\d{6}(-\d+)?", p.name[len(folder.name) + 1:])
                  and any(p.rglob("summary.json")))


def prepare_run_dir(out: str | Path, overwrite: bool = False, resume: bool = False,
                    command: Any = None) -> Path:
    """Create and claim the run folder for `command` (its record, commands.Command). A non-empty or claimed existing one gets a timestamped sibling
    unless overwrite/resume; with those, the folder must be `command`'s run, holding only files layerprobe wrote
    (check_owned), and one another live process is writing is an error. resume: the folder must exist already. An
    unwritable path is a one-line error before any work. (command None: an older caller, nothing checked.)"""
    command = name_of(command)
    path = Path(out)
    if not path.name:  # '.', '..', '/': a timestamped sibling needs a name, so the folder is named by its own path
        path = path.resolve()
        out = str(path)
    if resume and not path.is_dir():
        raise RunError(f"--resume: run folder '{out}' does not exist (a run stopped before it claimed its folder, "
                       "while checking its input or loading the model, leaves none): run the same command without "
                       "--resume.")
    if path.exists() and not path.is_dir():
        raise RunError(f"--out '{out}' is a file: pass a folder path.")
    try:
        for _ in range(100):
            if path.is_dir() and any(path.iterdir()) and not (overwrite or resume or holds_nothing(path)):
                path = _redirect(out)
            if command is not None and (overwrite or resume):
                check_owned(path, command, "--resume" if resume else "--overwrite")
            replaced = _replaced(path, command) if overwrite and not resume and path.is_dir() else None
            if replaced:
                check_removable(path, replaced)
            missing = [p for p in (path, *path.parents) if not p.exists()]  # what this mkdir makes
            path.mkdir(parents=True, exist_ok=True)
            if _claim(path, command, run_files(path, report=False)):
                if replaced:  # claimed, so no other process writes here: the replaced run's files go first
                    clear_replaced(path, replaced)
                    _claim(path, command, run_files(path, report=False))  # the lock names what is left (nothing of the old run)
                _made[path] = missing[1:]  # the parents it made (reports/<model>/): removed with it if left empty
                if resume or (overwrite and replaced is not None):  # claimed: no live process writes here
                    clear_leftovers(path)
                return path
            if overwrite or resume:
                raise RunError(f"'{path}' is being written by another layerprobe process ({_owner(path / LOCK)}): "
                               "wait for it, or pass another --out.")
            path = _redirect(out)
        raise RunError(f"Could not claim a run folder beside '{out}': pass another --out.")
    except OSError as exc:
        if Path(out).is_symlink() and not Path(out).exists():  # os.makedirs says 'File exists' of a dangling link
            raise RunError(f"--out '{out}' is a broken symbolic link (to '{os.readlink(out)}', which does not exist): "
                           "create its target, remove the link, or pass another --out.") from None
        raise RunError(f"--out '{out}' cannot be created or written ({exc.strerror or first_line(exc)}): pass a "
                       "writable folder.") from None


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temp file in the same folder and rename: readers see the old file or the new one. A full disk or
    a folder that became unwritable is a RunError naming the file (the temp file is removed, the old file kept)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        note_written(path)
        with publishing(path) as scratch:
            scratch.write_bytes(data)
    except OSError as exc:
        import errno

        fix = ("free space on that disk" if exc.errno in (errno.ENOSPC, errno.EDQUOT)
               else "make the folder writable")
        raise RunError(f"Cannot write '{path}' ({exc.strerror or first_line(exc)}): {fix} and run the command "
                       "again (with --resume where it saved its progress), or pass another --out.") from None


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def write_csv(path: Path, frame: Any) -> None:
    """A pandas DataFrame as CSV, floats exact (shortest round-trip form), atomically."""
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False)  # floats as repr: they read back bit for bit (resume, merge)
    atomic_write_text(path, buffer.getvalue())


def save_figure(path: Path, figure: Any, formats: tuple[str, ...] = ("png",)) -> list[Path]:
    """Save a matplotlib figure as path.<fmt> for each format, atomically; returns the files."""
    written = []
    for fmt in formats:
        buffer = io.BytesIO()
        figure.savefig(buffer, format=fmt, dpi=200, bbox_inches="tight")
        target = path.with_suffix(f".{fmt}")
        atomic_write_bytes(target, buffer.getvalue())
        written.append(target)
    return written


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunError(f"'{path}' is missing: is '{path.parent}' a finished layerprobe run folder?") from None
    except json.JSONDecodeError as exc:
        raise RunError(f"'{path}' is not valid JSON ({exc.msg}, line {exc.lineno}): re-run the command.") from None


def check_same_settings(folder: Path, saved: dict, identity: dict) -> None:
    """--resume: the settings saved in a run folder must be this run's; name the ones that differ, with both values."""
    if saved != identity:
        differ = [k for k in sorted(set(identity) | set(saved)) if saved.get(k) != identity.get(k)]
        shown = "; ".join(f"{k.removeprefix('resolved.')}: {saved.get(k)!r} then, {identity.get(k)!r} now"
                          for k in differ[:3])
        more = f"; and {len(differ) - 3} more" if len(differ) > 3 else ""
        raise RunError(f"--resume: '{folder}' was started with different settings ({shown}{more}): use a new --out, "
                       "or the same settings.")
