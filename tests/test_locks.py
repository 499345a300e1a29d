"""Run-folder locks under contention: of many processes claiming one lock at the same instant, exactly one gets it."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from layerprobe.runs.folder import ABANDONED, take_lock


def _claim(lock: str, start, won) -> None:
    start.wait()
    if take_lock(Path(lock)):
        with won.get_lock():
            won.value += 1
    start.wait()  # hold the claim until every contender has tried


def _contend(lock: Path, n: int = 6) -> int:
    context = multiprocessing.get_context("fork")
    start, won = context.Barrier(n), context.Value("i", 0)
    workers = [context.Process(target=_claim, args=(str(lock), start, won)) for _ in range(n)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    return won.value


def test_one_winner_for_a_fresh_lock(tmp_path):
    for round_ in range(12):
        lock = tmp_path / f"{round_}.lock"
        assert _contend(lock) == 1, round_


def test_one_winner_for_a_stale_lock(tmp_path):
    for round_ in range(12):
        lock = tmp_path / f"{round_}.lock"
        lock.write_text(ABANDONED + "\n")  # an unfinished run's folder: free to take over, by one process only
        assert _contend(lock) == 1, round_
    assert not [p for p in tmp_path.iterdir() if not p.name.endswith(".lock")]  # no helper file left behind


def test_a_file_system_without_hard_links_still_locks(tmp_path, monkeypatch):
    import os
    import socket

    def no_links(source, target):
        raise PermissionError(1, "Operation not permitted")  # what FAT and some FUSE mounts answer

    monkeypatch.setattr(os, "link", no_links)
    lock = tmp_path / "run.lock"
    assert take_lock(lock) and lock.read_text() == f"{os.getpid()}@{socket.gethostname()}\n"
    assert [p.name for p in tmp_path.iterdir()] == ["run.lock"]  # the temp file is gone
    assert _contend(tmp_path / "other.lock") == 1  # still one winner
