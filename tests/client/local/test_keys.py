"""The contributor key: made on first use, private (0600), stable, rotated with the old kept."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import stat
import sys

import pytest

from specsubmit.errors import KeyStoreError
from specsubmit.local import keys

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@posix_only
def test_first_use_creates_a_private_key_in_the_state_folder(specsubmit_home):
    assert not (specsubmit_home / "keys").exists()
    info = keys.current_info()
    path = specsubmit_home / "keys" / "current.key"
    assert info.path == path and path.is_file()
    assert mode(path) == 0o600
    assert mode(specsubmit_home / "keys") == 0o700


@posix_only
def test_key_is_private_even_with_a_permissive_umask(specsubmit_home):
    old = os.umask(0)
    try:
        keys.current_info()
    finally:
        os.umask(old)
    assert mode(specsubmit_home / "keys" / "current.key") == 0o600


def test_key_id_is_sha256_of_the_raw_public_key_and_stable():
    first = keys.current_info()
    public = base64.b64decode(first.public_key_b64)
    assert len(public) == 32
    assert first.key_id == hashlib.sha256(public).hexdigest()
    assert keys.current_info() == first
    assert bytes(keys.load_or_create().verify_key) == public


def test_rotate_keeps_the_old_key_as_retired(specsubmit_home):
    before = keys.current_info()
    old, new = keys.rotate()
    assert old.key_id == before.key_id and new.key_id != before.key_id
    assert keys.current_info().key_id == new.key_id
    retired = keys.retired()
    assert [r.key_id for r in retired] == [before.key_id]
    assert retired[0].public_key_b64 == before.public_key_b64
    if sys.platform != "win32":
        assert mode(old.path) == 0o600
    keys.rotate()
    assert len(keys.retired()) == 2


@posix_only
def test_a_key_readable_by_others_is_refused_with_the_fix(specsubmit_home):
    keys.current_info()
    path = specsubmit_home / "keys" / "current.key"
    path.chmod(0o644)
    with pytest.raises(KeyStoreError, match=r"readable by others \(mode 644\); run: chmod 600"):
        keys.load_or_create()


def test_a_corrupt_key_file_is_a_clear_error(specsubmit_home):
    folder = specsubmit_home / "keys"
    folder.mkdir(parents=True)
    path = folder / "current.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"not base64!!")
    os.close(fd)
    with pytest.raises(KeyStoreError, match="cannot read the key file"):
        keys.load_or_create()
    os.truncate(path, 0)
    with os.fdopen(os.open(path, os.O_WRONLY), "w") as handle:
        handle.write(base64.b64encode(b"short").decode())
    with pytest.raises(KeyStoreError, match="32-byte"):
        keys.load_or_create()


def test_an_existing_key_is_never_overwritten(specsubmit_home):
    first = keys.load_or_create()
    path = specsubmit_home / "keys" / "current.key"
    content = path.read_bytes()
    assert keys._write_new(path, keys.nacl.signing.SigningKey.generate()) is False
    assert path.read_bytes() == content
    assert bytes(keys.load_or_create()) == bytes(first)
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []


def run_cli(args, capsys, monkeypatch):
    from specsubmit.cli import main

    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def test_cli_keys_show_says_when_it_makes_the_key(specsubmit_home, capsys, monkeypatch):
    code, out, err = run_cli(["keys", "show"], capsys, monkeypatch)
    path = specsubmit_home / "keys" / "current.key"
    assert code == 0 and path.exists()
    assert err == (f"no key yet: made a new one at {path} (it signs your submissions; keep it "
                   "to stay the same contributor)\n")
    code, again, err = run_cli(["keys", "show"], capsys, monkeypatch)
    assert code == 0 and err == "" and again == out  # the same key, and no word on making it


def test_cli_keys_show_and_rotate(capsys, monkeypatch):
    code, out, _ = run_cli(["keys", "show"], capsys, monkeypatch)
    assert code == 0
    fields = dict(line.split(None, 1) if not line.startswith("key id") else
                  ("key_id", line.split()[-1]) for line in out.splitlines()
                  if line.strip())
    public = base64.b64decode(fields["public"].split()[-1])
    assert fields["key_id"] == hashlib.sha256(public).hexdigest() == keys.current_info().key_id
    code, out, _ = run_cli(["keys", "rotate"], capsys, monkeypatch)
    assert code == 0 and f"retired     {fields['key_id']}" in out
    code, out, _ = run_cli(["keys", "show", "--json"], capsys, monkeypatch)
    import json

    shown = json.loads(out)
    assert shown["key_id"] != fields["key_id"]
    assert [r["key_id"] for r in shown["retired"]] == [fields["key_id"]]


@posix_only
def test_cli_unreadable_key_is_one_line_and_exit_1(specsubmit_home, capsys, monkeypatch):
    keys.current_info()
    (specsubmit_home / "keys" / "current.key").chmod(0o640)
    code, _, err = run_cli(["keys", "show"], capsys, monkeypatch)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("specsubmit: error: key file")
