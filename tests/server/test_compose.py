"""The container deployment: docker-compose.yml, the Dockerfile and the proxy config.

No Docker engine runs here, so these tests read the files with a YAML parser and check the
wiring that would break a deployment (service names in URLs, healthchecks, volumes, the
non-root user), and ask a compose binary to validate the file where one works.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"


def _interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Compose's `${VAR}`, `${VAR:-default}` and `${VAR-default}` with an empty environment."""
    env = env or {}

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(3)
        return env.get(name) or (default or "")

    return re.sub(r"\$\{([A-Z0-9_]+)(:?-([^}]*))?\}", replace, value)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def _env(service: dict[str, Any]) -> dict[str, str]:
    environment = service.get("environment", {})
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    return {key: _interpolate(str(value)) for key, value in environment.items()}


def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    instructions = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    return instructions


def test_services_and_profiles(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"postgres", "server", "server-embedded"} <= set(services)
    # The default `docker compose up` runs the PostgreSQL deployment; the embedded server
    # only runs when its profile is asked for, so the two never fight over the port.
    for name in ("postgres", "server"):
        assert "profiles" not in services[name], name
    assert services["server-embedded"]["profiles"] == ["embedded"]


def test_server_is_built_from_the_repository_dockerfile(compose: dict[str, Any]) -> None:
    for name in ("server", "server-embedded"):
        build = compose["services"][name]["build"]
        context = ROOT / build["context"]
        assert (context / build.get("dockerfile", "Dockerfile")).resolve() == DOCKERFILE


def test_postgres_uses_official_image_named_volume_and_healthcheck(
    compose: dict[str, Any],
) -> None:
    postgres = compose["services"]["postgres"]
    assert postgres["image"].split(":")[0] == "postgres"
    volume_names = [v.split(":")[0] for v in postgres["volumes"]]
    data_mounts = [v for v in postgres["volumes"] if v.endswith(":/var/lib/postgresql/data")]
    assert len(data_mounts) == 1
    named = data_mounts[0].split(":")[0]
    assert not named.startswith((".", "/")), "a named volume, not a bind mount"
    assert named in compose["volumes"]
    assert set(volume_names) <= set(compose["volumes"])
    test = postgres["healthcheck"]["test"]
    command = " ".join(test[1:]) if isinstance(test, list) else test
    assert "pg_isready" in command
    env = _env(postgres)
    assert f"-U {env['POSTGRES_USER']}" in command and f"-d {env['POSTGRES_DB']}" in command


def test_server_database_url_points_at_the_postgres_service(compose: dict[str, Any]) -> None:
    services = compose["services"]
    server, postgres = services["server"], services["postgres"]
    url = urlsplit(_env(server)["SPECSERVER_DATABASE_URL"])
    pg_env = _env(postgres)
    assert url.scheme == "postgresql+psycopg"
    assert url.hostname == "postgres" and (url.port or 5432) == 5432
    assert url.username == pg_env["POSTGRES_USER"]
    assert url.password == pg_env["POSTGRES_PASSWORD"]
    assert url.path.lstrip("/") == pg_env["POSTGRES_DB"]
    # The password comes from the same variable on both sides.
    raw_url = server["environment"]["SPECSERVER_DATABASE_URL"]
    raw_password = postgres["environment"]["POSTGRES_PASSWORD"]
    assert raw_password in raw_url
    overridden = _interpolate(raw_url, {"POSTGRES_PASSWORD": "s3cret"})
    expected = _interpolate(raw_password, {"POSTGRES_PASSWORD": "s3cret"})
    assert urlsplit(overridden).password == expected == "s3cret"


def test_server_waits_for_healthy_dependencies(compose: dict[str, Any]) -> None:
    services = compose["services"]
    depends = services["server"]["depends_on"]
    assert depends["postgres"]["condition"] == "service_healthy"
    for name, condition in depends.items():
        assert condition["condition"] == "service_healthy"
        assert "healthcheck" in services[name], f"{name} has no healthcheck to wait for"


def test_rate_limit_store_is_shared_by_replicas(compose: dict[str, Any]) -> None:
    services = compose["services"]
    server = services["server"]
    assert server.get("deploy", {}).get("replicas", 1) >= 2
    url = urlsplit(_env(server)["SPECSERVER_REDIS_URL"])
    assert url.scheme == "redis" and url.hostname in services
    assert services[url.hostname]["image"].split(":")[0] == "redis"
    # Replicas publish no host port (they would collide); the proxy does.
    assert "ports" not in server
    assert services["proxy"]["ports"]


def test_proxy_balances_over_the_server_service(compose: dict[str, Any]) -> None:
    proxy = compose["services"]["proxy"]
    mounts = {v.split(":")[1]: ROOT / v.split(":")[0] for v in proxy["volumes"]}
    config = mounts["/etc/nginx/conf.d/default.conf"].read_text()
    upstream = re.search(r"upstream\s+(\w+)\s*\{([^}]*)\}", config)
    assert upstream is not None
    assert re.search(r"server\s+server:8000\s*;", upstream.group(2))
    assert f"proxy_pass http://{upstream.group(1)};" in config
    # The proxy overwrites X-Forwarded-For (never appends what a client sent).
    assert "proxy_set_header X-Forwarded-For $remote_addr;" in config
    assert proxy["depends_on"]["server"]["condition"] == "service_healthy"


def test_embedded_profile_runs_alone_on_a_duckdb_volume(compose: dict[str, Any]) -> None:
    embedded = compose["services"]["server-embedded"]
    assert "depends_on" not in embedded
    env = _env(embedded)
    assert "SPECSERVER_REDIS_URL" not in env
    database = env["SPECSERVER_DATABASE_URL"]
    assert database.endswith(".duckdb") and "://" not in database
    mounts = {v.split(":")[1]: v.split(":")[0] for v in embedded["volumes"]}
    mount_point = next(m for m in mounts if database.startswith(m.rstrip("/") + "/"))
    assert mounts[mount_point] in compose["volumes"]
    assert embedded.get("deploy", {}).get("replicas", 1) == 1, "DuckDB allows one writer"


def test_dockerfile_base_install_user_healthcheck_and_command() -> None:
    instructions = _dockerfile_instructions()
    keywords = [k for k, _ in instructions]
    assert instructions[0] == ("FROM", "python:3.11-slim")
    # The server and its wire format, never the contributor's client.
    installs = [v for k, v in instructions if k == "RUN" and "pip install" in v]
    assert installs and "./schema" in installs[0] and "./server" in installs[0]
    assert not any("client" in v for k, v in instructions if k in {"COPY", "RUN"})
    users = [v for k, v in instructions if k == "USER"]
    assert users, "the image must not run as root"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}
    # The USER comes after every RUN that needs root, and before the entrypoint.
    assert keywords.index("ENTRYPOINT") > max(i for i, k in enumerate(keywords) if k == "USER")
    created = [v for k, v in instructions if k == "RUN" and "useradd" in v]
    assert created and re.search(rf"useradd\b.*\b{user}\b", created[0])
    healthcheck = next(v for k, v in instructions if k == "HEALTHCHECK")
    assert "/healthz" in healthcheck
    entrypoint = next(v for k, v in instructions if k == "ENTRYPOINT")
    assert yaml.safe_load(entrypoint) == ["specserver", "serve", "--host", "0.0.0.0"]
    cmd = yaml.safe_load(next(v for k, v in instructions if k == "CMD"))
    assert cmd == ["--port", "8000"] and "EXPOSE" in keywords
    assert next(v for k, v in instructions if k == "EXPOSE") == "8000"


def test_dockerignore_keeps_state_and_tooling_out_of_the_image() -> None:
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv", "tests", "*.duckdb", "*.duckdb.wal"} <= ignored
    # Whatever the Dockerfile copies must not be ignored.
    copied = [v.split()[0] for k, v in _dockerfile_instructions() if k == "COPY"]
    for path in copied:
        assert path not in ignored, path


@pytest.mark.parametrize("service", ["server", "server-embedded"])
def test_every_server_variable_is_a_setting_and_validates(
    compose: dict[str, Any], service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from specserver.settings import ServerSettings, get_settings

    env = _env(compose["services"][service])
    fields = set(ServerSettings.model_fields)
    for name in env:
        assert name.startswith("SPECSERVER_"), name
        assert name.removeprefix("SPECSERVER_").lower() in fields, f"{name} is not a setting"
    for name in list(os.environ):
        if name.startswith("SPECSERVER_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = get_settings()
    assert settings.database_url == env["SPECSERVER_DATABASE_URL"]
    if service == "server":
        assert settings.resolved_database_url.startswith("postgresql+psycopg://")
        assert settings.redis_url and settings.proxy_networks()
    else:
        assert settings.resolved_database_url == "duckdb:////data/specbench.duckdb"


def _healthcheck_command(port: int) -> list[str]:
    healthcheck = next(v for k, v in _dockerfile_instructions() if k == "HEALTHCHECK")
    command = yaml.safe_load(healthcheck.split(" CMD ", 1)[1])
    assert isinstance(command, list)
    return [str(part).replace("127.0.0.1:8000", f"127.0.0.1:{port}") for part in command]


def test_image_command_serves_and_its_healthcheck_sees_it(tmp_path: Path) -> None:
    """The ENTRYPOINT with the embedded service's environment really serves /healthz, and
    the HEALTHCHECK command passes against it and fails when nothing answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    check = _healthcheck_command(port)
    assert check[0] == "python"
    check[0] = sys.executable
    down = subprocess.run(check, capture_output=True, timeout=30, check=False)
    assert down.returncode != 0
    entrypoint = yaml.safe_load(next(v for k, v in _dockerfile_instructions()
                                      if k == "ENTRYPOINT"))
    command = [str(Path(sys.executable).with_name(entrypoint[0])), *entrypoint[1:],
               "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECSERVER_")}
    env["SPECSERVER_DATABASE_URL"] = str(tmp_path / "data" / "specbench.duckdb")
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None, server.stderr.read() if server.stderr else ""
            assert time.monotonic() < deadline, "the image command did not start serving"
            time.sleep(0.1)
        up = subprocess.run(check, capture_output=True, timeout=30, check=False)
        assert up.returncode == 0, up.stderr
        assert (tmp_path / "data" / "specbench.duckdb").exists()
    finally:
        server.terminate()
        server.wait(30)
        if server.stderr:
            server.stderr.close()


def _compose_command() -> list[str] | None:
    candidates = [["docker", "compose"], ["docker-compose"]]
    for command in candidates:
        if shutil.which(command[0]) is None:
            continue
        try:
            probe = subprocess.run(
                [*command, "version"], capture_output=True, timeout=30, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return command
    return None


@pytest.mark.parametrize("profile", [None, "embedded"])
def test_compose_binary_accepts_the_file(profile: str | None) -> None:
    command = _compose_command()
    if command is None:
        pytest.skip("no working compose binary (`docker compose version` fails)")
    args = [*command, "-f", str(COMPOSE)]
    if profile:
        args += ["--profile", profile]
    result = subprocess.run(
        [*args, "config", "-q"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
