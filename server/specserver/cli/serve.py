"""`specserver serve`: run the server with uvicorn: one server process (DuckDB has one
writer) plus check worker processes (``checkpool``)."""

from __future__ import annotations

import gc
import os
import socket
from typing import Annotated

import typer

from specserver.settings import GC_THRESHOLDS, ServerSettings

MAX_DEFAULT_CHECK_WORKERS = 8  # each worker holds its own interpreter (~60 MB)


def default_check_workers() -> int:
    """One check worker per core, up to ``MAX_DEFAULT_CHECK_WORKERS``."""
    return max(1, min(os.cpu_count() or 1, MAX_DEFAULT_CHECK_WORKERS))


def listen(host: str, port: int) -> socket.socket:
    """Bind the listening socket here, before the app is built, so that the URL printed and
    the public base URL carry the real port (``--port 0``: one the system picks), and a
    port in use is one line. The same socket options as uvicorn's own ``bind_socket``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        typer.echo(f"specserver: cannot listen on {host}:{port}: {exc.strerror or exc}",
                   err=True)
        raise typer.Exit(1) from None
    sock.set_inheritable(True)
    # Listening from now on: a client that connects right after the URL is printed waits in
    # the backlog for the app instead of being refused (uvicorn's default backlog).
    sock.listen(2048)
    return sock


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _preflight_store(settings: ServerSettings) -> None:
    """Open (and migrate) the store once before uvicorn starts, so that a store that
    cannot be opened (PostgreSQL down, a DuckDB file held by another process, no
    permission) is one line and exit 1, not uvicorn's lifespan traceback."""
    from specserver.http import build_store
    from specserver.store import display_url

    store = build_store(settings)
    try:
        store.open()
    except Exception as exc:  # every cause is reported the same way: one line, exit 1
        store.engine.dispose()
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        typer.echo(f"specserver: cannot open the store "
                   f"{display_url(settings.resolved_database_url)}: {reason}", err=True)
        raise typer.Exit(1) from None
    store.close()


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve(
        host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="port to listen on")] = 8000,
        database: Annotated[
            str | None,
            typer.Option(help="DuckDB file path or SQLAlchemy URL [env SPECSERVER_DATABASE_URL]"),
        ] = None,
        log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "warning",
        check_workers: Annotated[
            int | None,
            typer.Option(min=0, max=64, help="processes that verify and check submissions "
                         "(0 = in the server process) [default: one per core, at most 8; env "
                         "SPECSERVER_CHECK_WORKERS]"),
        ] = None,
        create_folder: Annotated[bool, typer.Option(
            "--create-folder", help="create the --database file's folder if it does not "
            "exist (without it, a missing folder is refused: a typo would start an empty "
            "store)")] = False,
    ) -> None:
        """Start the server; prints its URL."""
        import uvicorn
        from pydantic import ValidationError

        from specserver.cli.admin_client import missing_folder
        from specserver.cli.connections import (
            PeerLimits,
            bounded_protocol,
            connection_bound,
            raise_open_file_limit,
        )
        from specserver.http import create_app
        from specserver.settings import get_settings, legacy_note

        overrides: dict[str, object] = {}
        if database:
            overrides["database_url"] = database
            problem = None if create_folder else missing_folder(database)
            if problem is not None:
                typer.echo(f"specserver: {problem}; pass --create-folder to create it",
                           err=True)
                raise typer.Exit(1)
        sock = listen(host, port)
        port = sock.getsockname()[1]  # the real one, also for --port 0
        try:
            settings = get_settings(**overrides)
            if "public_base_url" not in settings.model_fields_set:
                settings = settings.model_copy(update={"public_base_url": _url(host, port)})
            if check_workers is not None:
                settings = settings.model_copy(update={"check_workers": check_workers})
            elif "check_workers" not in settings.model_fields_set:
                # Checks in worker processes: one Python process computes on one core.
                settings = settings.model_copy(update={"check_workers": default_check_workers()})
        except ValidationError as exc:
            sock.close()
            typer.echo(f"specserver: invalid settings: {exc.errors()[0]['msg']}", err=True)
            raise typer.Exit(2) from None
        gc.set_threshold(*GC_THRESHOLDS)  # why: settings.GC_THRESHOLDS
        from specserver.store import display_url

        try:
            _preflight_store(settings)
        except typer.Exit:
            sock.close()
            raise
        typer.echo(f"specserver {_url(host, port)} "
                   f"(store: {display_url(settings.resolved_database_url)})")
        note = legacy_note(settings.resolved_database_url)
        if note is not None:
            typer.echo(f"specserver: {note}", err=True)
        bound = connection_bound(settings.max_connections, raise_open_file_limit())
        # Behind a trusted proxy the proxy's connections are not counted per address: it
        # carries everybody's requests (deploy/nginx.conf bounds its clients).
        peers = PeerLimits(settings.max_connections_per_address,
                           settings.max_unfinished_heads_per_address,
                           exempt=settings.proxy_networks())
        config = uvicorn.Config(
            create_app(settings),
            # A deadline and a size bound for request heads, bounds on connections in all
            # and per address (cli/connections.py).
            http=bounded_protocol(settings.head_timeout_s, bound,
                                  max_head_bytes=settings.max_head_bytes, peers=peers),
            # uvicorn's own bound, for h11 where httptools is not installed: the same size.
            h11_max_incomplete_event_size=settings.max_head_bytes,
            host=host,
            port=port,
            log_level=log_level,
            access_log=False,
            server_header=False,
            # X-Forwarded-For is believed only from SPECSERVER_TRUSTED_PROXIES (ratelimit.py),
            # not uvicorn's default of any loopback peer.
            proxy_headers=False,
        )
        server = uvicorn.Server(config)
        try:  # as uvicorn.run does it, on the socket bound above
            server.run(sockets=[sock])
        except KeyboardInterrupt:
            pass
        if not server.started:
            raise typer.Exit(3)  # uvicorn's STARTUP_FAILURE
