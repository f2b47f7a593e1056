#!/usr/bin/env python3
"""The README's two set-up commands, with nothing but Python >= 3.11 needed:

    python3 scripts/dev.py serve   # venv + specschema, specserver; then `specserver serve`
    python3 scripts/dev.py test    # venv + all three + the dev group; ruff, mypy --strict, pytest

Extra arguments after `serve` go to `specserver serve`; after `test`, to pytest.
The three distributions (schema/, client/, server/) are installed editable; the development
tools are the root pyproject's `[dependency-groups] dev`, read here with tomllib so that any
pip works (pip learned `--group` only in 25.1). SPECBENCH_VENV overrides the venv's place.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("SPECBENCH_VENV", ROOT / ".venv"))
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PACKAGES = ["schema/specschema", "client/specsubmit", "server/specserver"]


def run(*command: str | Path) -> None:
    print("+", " ".join(str(c) for c in command), flush=True)
    result = subprocess.run([str(c) for c in command], cwd=ROOT, check=False)
    if result.returncode != 0:
        sys.exit(result.returncode)


def dev_group() -> list[str]:
    """The root pyproject's `dev` dependency group (PEP 735; plain requirement strings)."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        group = tomllib.load(file)["dependency-groups"]["dev"]
    return [str(requirement) for requirement in group]


def ensure_venv(distributions: list[str], extra: list[str]) -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - the point is to say so clearly
        sys.exit(f"specbench needs Python >= 3.11, this is {sys.version.split()[0]}")
    if not (BIN / "python").exists() and not (BIN / "python.exe").exists():
        print(f"creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    # A venv made before the split holds the old single `specbench` distribution, whose
    # files (the two console scripts, the import finder) would shadow the three new ones.
    stale = subprocess.run([str(BIN / "python"), "-m", "pip", "show", "-q", "specbench"],
                           cwd=ROOT, capture_output=True, check=False)
    if stale.returncode == 0:
        run(BIN / "python", "-m", "pip", "uninstall", "-y", "-q", "specbench")
    editable = [part for name in distributions for part in ("-e", name)]
    run(BIN / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
        *editable, *extra)


def serve(args: list[str]) -> None:
    ensure_venv(["schema", "server"], [])
    os.execv(str(BIN / "specserver"), [str(BIN / "specserver"), "serve", *args])


def test(args: list[str]) -> None:
    ensure_venv(["schema", "client", "server"], dev_group())
    run(BIN / "ruff", "check", ".")
    run(BIN / "mypy", *PACKAGES)
    run(BIN / "python", "-m", "pytest", *args)


def main() -> None:
    commands = {"serve": serve, "test": test}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit("usage: python3 scripts/dev.py serve|test [args...]")
    commands[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
