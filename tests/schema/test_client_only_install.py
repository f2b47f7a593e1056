"""A contributor's plain install must not need the server's dependencies."""

import os
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVER_ONLY = ["fastapi", "duckdb", "duckdb_engine", "sqlalchemy", "uvicorn", "psycopg"]

# Imports every module of the client and schema packages with the server's dependencies
# made unimportable, and fails if anything pulls in specserver.
_PROBE = textwrap.dedent(
    """
    import importlib, pkgutil, sys
    blocked = set(sys.argv[1].split(","))

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in blocked:
                raise ImportError(f"blocked server dependency: {name}")
            return None

    sys.meta_path.insert(0, Block())
    for top in ("specschema", "specsubmit"):
        package = importlib.import_module(top)
        for info in pkgutil.walk_packages(package.__path__, top + "."):
            importlib.import_module(info.name)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in blocked)
    assert not loaded, loaded
    print("ok")
    """
)


def test_client_and_schema_import_without_server_dependencies() -> None:
    blocked = ",".join([*SERVER_ONLY, "specserver"])
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, blocked], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.slow
def test_plain_install_in_a_fresh_venv(tmp_path: Path) -> None:
    """pip install of the distribution without extras: no server packages, imports work."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    environment = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(ROOT)],
        capture_output=True, text=True, env=environment, check=False, timeout=600,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    listing = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"],
        capture_output=True, text=True, check=True,
    ).stdout.lower()
    for name in ["fastapi", "duckdb", "sqlalchemy", "uvicorn", "psycopg"]:
        assert f"\n{name}==" not in "\n" + listing, f"{name} installed by a plain install"
    probe = subprocess.run(
        [str(python), "-c", "import specschema, specsubmit.cli; print('ok')"],
        capture_output=True, text=True, check=False,
    )
    assert probe.stdout.strip() == "ok", probe.stderr
    assert subprocess.run(
        [str(env_dir / "bin" / "specsubmit"), "protocols"], capture_output=True, check=False
    ).returncode == 0
