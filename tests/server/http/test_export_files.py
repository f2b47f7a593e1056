"""ExportFiles: which kept export file a request may be served, and which files are dropped."""

from __future__ import annotations

from pathlib import Path

from specserver.http import exports

# data_version tokens: submissions|latest receipt|audit rows|latest audit|bans
V1 = "10|2026-11-01 10:00:00|2|2026-11-01 09:00:00|0"
V1_INSERT = "11|2026-11-01 10:00:05|2|2026-11-01 09:00:00|0"
V1_HIDE = "10|2026-11-01 10:00:00|3|2026-11-01 10:00:06|0"
V1_BAN = "10|2026-11-01 10:00:00|3|2026-11-01 10:00:06|1"


def _file(folder: Path, name: str, text: str = "") -> str:
    path = folder / name
    path.write_text(text or name)
    return str(path)


def _read(ready: tuple[object, str] | None) -> tuple[str, str] | None:
    if ready is None:
        return None
    handle, version = ready
    with handle:  # type: ignore[attr-defined]
        return handle.read().decode(), version  # type: ignore[attr-defined]


def test_reuse_within_the_window_across_inserts_only(tmp_path: Path) -> None:
    now = [1000.0]
    files = exports.ExportFiles(reuse_s=60, clock=lambda: now[0])
    files.add("k", V1, _file(tmp_path, "a")).close()
    assert _read(files.open_kept("k", V1)) == ("a", V1)
    assert _read(files.open_kept("k", V1_INSERT)) == ("a", V1)  # new rows may be late
    assert files.open_kept("k", V1_HIDE) is None  # never across a moderation action
    assert files.open_kept("k", V1_BAN) is None
    assert files.open_kept("other", V1) is None
    now[0] += 59.9
    assert _read(files.open_kept("k", V1_INSERT)) == ("a", V1)
    now[0] += 0.2
    assert files.open_kept("k", V1_INSERT) is None  # too old for another version
    assert _read(files.open_kept("k", V1)) == ("a", V1)  # its own version: always


def test_reuse_0_serves_a_file_only_at_its_own_version(tmp_path: Path) -> None:
    files = exports.ExportFiles(reuse_s=0)
    files.add("k", V1, _file(tmp_path, "a")).close()
    assert _read(files.open_kept("k", V1)) == ("a", V1)
    assert files.open_kept("k", V1_INSERT) is None


def test_a_replaced_file_is_unlinked_yet_whole_for_who_has_it_open(tmp_path: Path) -> None:
    files = exports.ExportFiles(reuse_s=60)
    old = _file(tmp_path, "old", "x" * 100_000)
    files.add("k", V1, old).close()
    downloading = files.open_kept("k", V1)
    assert downloading is not None
    files.add("k", V1_HIDE, _file(tmp_path, "new")).close()
    assert not Path(old).exists()
    assert _read(downloading) == ("x" * 100_000, V1)
    assert _read(files.open_kept("k", V1_HIDE)) == ("new", V1_HIDE)


def test_at_most_keep_files_the_least_recently_asked_for_dropped(tmp_path: Path) -> None:
    files = exports.ExportFiles(reuse_s=60, keep=3)
    paths = {key: _file(tmp_path, key) for key in ("a", "b", "c", "d")}
    for key in ("a", "b", "c"):
        files.add(key, V1, paths[key]).close()
    assert _read(files.open_kept("a", V1)) == ("a", V1)  # "a" is now the most recent
    files.add("d", V1, paths["d"]).close()
    assert files.open_kept("b", V1) is None and not Path(paths["b"]).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "c", "d"]
    files.clear()
    assert list(tmp_path.iterdir()) == []
    files.clear()  # twice is harmless
