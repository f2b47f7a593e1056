"""A contributor's install (`pip install specsubmit`) must not need or bring the server.

The fast test blocks the server's imports in this interpreter; the slow ones build the three
wheels and install the client's into a fresh venv, as pipx would.
"""

import os
import shutil
import subprocess
import sys
import textwrap
import venv
import zipfile
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


SERVER_IMPORTS = ["fastapi", "sqlalchemy", "duckdb", "duckdb_engine", "pydantic_settings",
                  "uvicorn", "psycopg", "redis", "specserver"]


def _build_wheels(out: Path, *projects: str) -> dict[str, Path]:
    """`pip wheel --no-deps` of the named project folders, as a release would (no network
    beyond the build backend from the registry); returns {distribution name: wheel path}.

    Built from copies: setuptools builds in the source tree, and a stale build/lib there
    would put deleted modules into the wheel (and race with other builds)."""
    sources = out / "src"
    for project in projects:
        shutil.copytree(ROOT / project, sources / project, ignore=shutil.ignore_patterns(
            "build", "*.egg-info", "__pycache__"))
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
         *(str(sources / project) for project in projects)],
        capture_output=True, text=True, check=False, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    wheels = {path.name.split("-")[0]: path for path in out.glob("*.whl")}
    assert sorted(wheels) == sorted(NAMES[project] for project in projects), wheels
    return wheels


NAMES = {"schema": "specschema", "client": "specsubmit", "server": "specserver"}


def _wheel_files(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def _wheel_text(wheel: Path, suffix: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/" + suffix)]
        return archive.read(name).decode()


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _build_wheels(tmp_path_factory.mktemp("wheels"), "schema", "client", "server")


@pytest.mark.slow
def test_each_wheel_holds_only_its_package_its_data_and_its_command(
    wheels: dict[str, Path],
) -> None:
    for name, wheel in wheels.items():
        tops = {f.split("/")[0] for f in _wheel_files(wheel) if ".dist-info/" not in f}
        assert tops == {name}, (name, tops)
        assert f"{name}/py.typed" in _wheel_files(wheel)
    schema_files = _wheel_files(wheels["specschema"])
    assert "specschema/protocols/hardnumbers-m2.v1.json" in schema_files
    assert "specschema/protocols/ollama-draft.v1.json" in schema_files
    server_files = _wheel_files(wheels["specserver"])
    assert "specserver/http/page/templates/page.html" in server_files
    assert "specserver/http/page/templates/style.css" in server_files
    # One command per distribution, named like it.
    assert "[console_scripts]\nspecsubmit = specsubmit.cli:main" in _wheel_text(
        wheels["specsubmit"], "entry_points.txt")
    assert "specserver" not in _wheel_text(wheels["specsubmit"], "entry_points.txt")
    assert "specsubmit" not in _wheel_text(wheels["specserver"], "entry_points.txt")
    client_requires = [line.split(":", 1)[1].strip().lower()
                       for line in _wheel_text(wheels["specsubmit"], "METADATA").splitlines()
                       if line.startswith("Requires-Dist:")]
    assert "specschema==0.1.0" in client_requires
    for server_only in ["fastapi", "sqlalchemy", "duckdb", "pydantic-settings", "uvicorn"]:
        assert not any(r.startswith(server_only) for r in client_requires), client_requires
    server_metadata = _wheel_text(wheels["specserver"], "METADATA")
    assert "Requires-Dist: specschema==0.1.0" in server_metadata
    assert "Requires-Dist: duckdb>=2.0" in server_metadata


@pytest.mark.slow
def test_client_wheel_in_a_fresh_venv_gives_specsubmit_and_nothing_of_the_server(
    wheels: dict[str, Path], tmp_path: Path,
) -> None:
    """What `pipx install specsubmit` does: a fresh venv, the client wheel and its deps."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    environment = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    environment.pop("PYTHONPATH", None)
    install = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "-q",
         str(wheels["specsubmit"]), str(wheels["specschema"])],
        capture_output=True, text=True, env=environment, check=False, timeout=600,
    )
    assert install.returncode == 0, install.stderr[-2000:]

    help_run = subprocess.run([str(bin_dir / "specsubmit"), "--help"], capture_output=True,
                              text=True, env=environment, check=False, timeout=60)
    assert help_run.returncode == 0, help_run.stderr
    assert "run" in help_run.stdout and "submit" in help_run.stdout
    assert not (bin_dir / "specserver").exists()
    # Package data came along: the protocols are listed from the installed JSON files.
    protocols = subprocess.run([str(bin_dir / "specsubmit"), "protocols"], capture_output=True,
                               text=True, env=environment, check=False, timeout=60)
    assert protocols.returncode == 0, protocols.stderr
    assert "hardnumbers-m2" in protocols.stdout

    probe = subprocess.run(
        [str(bin_dir / "python"), "-c",
         "import importlib.util, sys\n"
         "print(','.join(m for m in sys.argv[1:] if importlib.util.find_spec(m)))",
         *SERVER_IMPORTS],
        capture_output=True, text=True, env=environment, check=False, cwd=tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "", f"importable in a client-only venv: {probe.stdout}"
    listing = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "list", "--format=freeze"],
        capture_output=True, text=True, env=environment, check=True,
    ).stdout.lower()
    names = {line.split("==")[0] for line in listing.splitlines()}
    assert {"specsubmit", "specschema"} <= names
    assert not names & {"fastapi", "sqlalchemy", "duckdb", "pydantic-settings", "specserver",
                        "uvicorn", "psycopg", "specbench"}, names
