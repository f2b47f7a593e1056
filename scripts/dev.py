#!/usr/bin/env python3
"""The README's two set-up commands, with nothing but Python >= 3.11 needed:

    python3 scripts/dev.py serve   # venv + server extra, then `specserver serve` (prints its URL)
    python3 scripts/dev.py test    # venv + all extras, then ruff, mypy --strict and pytest

Extra arguments after `serve` go to `specserver serve`; after `test`, to pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
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


def ensure_venv(extras: str) -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - the point is to say so clearly
        sys.exit(f"specbench needs Python >= 3.11, this is {sys.version.split()[0]}")
    if not (BIN / "python").exists() and not (BIN / "python.exe").exists():
        print(f"creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    run(BIN / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
        "-e", f".[{extras}]")


def serve(args: list[str]) -> None:
    ensure_venv("server")
    os.execv(str(BIN / "specserver"), [str(BIN / "specserver"), "serve", *args])


def test(args: list[str]) -> None:
    ensure_venv("server,dev")
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
