"""The README's commands are the ones that run: the two test tiers of scripts/dev.py, the one
.ci/run calls, and the protocol list that `specsubmit protocols` prints."""

from __future__ import annotations

import importlib.util
import os
import re
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from specschema.protocol_files import shipped_protocols

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DEFAULT_COMMAND = "python3 scripts/dev.py test"
FULL_COMMAND = "python3 scripts/dev.py test --full"


def _dev() -> ModuleType:
    spec = importlib.util.spec_from_file_location("specbench_dev", ROOT / "scripts" / "dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end != -1 else None]


def test_the_readme_names_both_tiers_and_ci_runs_the_full_one() -> None:
    first_screen = README[:README.index("\n## ")]
    for command in (DEFAULT_COMMAND, FULL_COMMAND):
        assert command in first_screen and command in _section("Testing")
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    assert ci[-1] == FULL_COMMAND  # the last step, after the installs


def test_every_declared_marker_belongs_to_the_full_tier_only() -> None:
    """A new marker must be placed: the default tier leaves out exactly the declared ones,
    which is what the README's Testing section names."""
    dev = _dev()
    with (ROOT / "pyproject.toml").open("rb") as file:
        declared = [m.split(":")[0] for m in tomllib.load(file)["tool"]["pytest"]["ini_options"][
            "markers"]]
    assert sorted(dev.FULL_ONLY_MARKERS) == sorted(declared)
    assert f'-m "{dev.FAST_TIER}"' in _section("Testing")
    for marker in declared:
        assert f"`{marker}`" in _section("Testing")


@pytest.mark.parametrize(("argv", "tier"), [
    ([], True), (["--full"], False), (["-k", "consent"], True), (["--full", "-x"], False)])
def test_the_test_command_runs_its_tier(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str],
                                        argv: list[str], tier: bool) -> None:
    dev = _dev()
    commands: list[list[str]] = []
    tiers_seen: list[str | None] = []
    monkeypatch.setenv(dev.TIER_VARIABLE, "full" if tier else "default")  # the other one

    def run(*command: str) -> None:
        commands.append([str(c) for c in command])
        tiers_seen.append(os.environ.get(dev.TIER_VARIABLE))

    monkeypatch.setattr(dev, "ensure_venv", lambda *_: print("(pip runs here)"))
    monkeypatch.setattr(dev, "run", run)
    dev.test(list(argv))
    pytest_command = commands[-1][commands[-1].index("pytest") + 1:]
    rest = [arg for arg in argv if arg != "--full"]
    assert pytest_command == (["-m", dev.FAST_TIER, "-n", str(dev.DEFAULT_TIER_WORKERS)]
                              if tier else []) + rest
    # pytest learns the tier (the property tests' example counts: tests/support/tiers.py)
    assert tiers_seen[-1] == ("default" if tier else "full")
    said = capsys.readouterr().out
    assert ("Default tier" in said) is tier and ("Full tier" in said) is not tier
    # Said before anything is downloaded or built.
    assert said.index("Default tier" if tier else "Full tier") < said.index("(pip runs here)")


def test_the_full_tier_says_it_will_download_and_build_llama_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))  # nothing built there
    dev = _dev()
    full = "\n".join(dev.plan(True))
    assert "downloads the llama-cpp-python" in full and "compiles llama-server" in full
    assert str(tmp_path / "cache" / "llama-server") in full
    assert "PostgreSQL" in full and "Chromium" in full
    default = "\n".join(dev.plan(False))
    assert "no other download or build" in default and FULL_COMMAND in default


def test_the_readme_lists_every_protocol_at_its_newest_version() -> None:
    """`specsubmit protocols` prints ``shipped_protocols()``: the same ids and versions."""
    listed = re.findall(r"^- `([a-z0-9.-]+)` v(\d+):", _section("Protocols"), re.MULTILINE)
    assert sorted((pid, int(v)) for pid, v in listed) == sorted(
        (p.id, p.version) for p in shipped_protocols().values())


def test_a_fresh_venv_is_told_what_it_downloads_and_that_nothing_is_compiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    dev = _dev()
    monkeypatch.setattr(dev, "VENV", tmp_path / "venv")
    monkeypatch.setattr(dev, "BIN", tmp_path / "venv" / "bin")
    said = dev.plan(False)[0]
    assert "downloads" in said and "from PyPI" in said
    assert "nothing is compiled" in said
    assert "nothing compiled" in _section("Testing")
