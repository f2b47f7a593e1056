"""`specserver serve`: run the server with uvicorn: one server process (DuckDB has one
writer) plus check worker processes (``checkpool``)."""

from __future__ import annotations

import gc
import os
from typing import Annotated

import typer

from specserver.settings import GC_THRESHOLDS, ServerSettings

MAX_DEFAULT_CHECK_WORKERS = 8  # each worker holds its own interpreter (~60 MB)


def default_check_workers() -> int:
    """One check worker per core, up to ``MAX_DEFAULT_CHECK_WORKERS``."""
    return max(1, min(os.cpu_count() or 1, MAX_DEFAULT_CHECK_WORKERS))


def _preflight_store(settings: ServerSettings) -> None:
    """Open (and migrate) the store once before uvicorn starts, so that a store that
    cannot be opened (PostgreSQL down, a DuckDB file held by another process, no
    permission) is one line and exit 1, not uvicorn's lifespan traceback."""
    from specserver.http.app import build_store
    from specserver.store.database import display_url

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
    ) -> None:
        """Start the server; prints its URL."""
        import uvicorn
        from pydantic import ValidationError

        from specserver.http.app import create_app
        from specserver.settings import get_settings

        overrides: dict[str, object] = {}
        if database:
            overrides["database_url"] = database
        try:
            settings = get_settings(**overrides)
            if "public_base_url" not in settings.model_fields_set:
                settings = settings.model_copy(
                    update={"public_base_url": f"http://{host}:{port}"})
            if check_workers is not None:
                settings = settings.model_copy(update={"check_workers": check_workers})
            elif "check_workers" not in settings.model_fields_set:
                # Checks in worker processes: one Python process computes on one core.
                settings = settings.model_copy(update={"check_workers": default_check_workers()})
        except ValidationError as exc:
            typer.echo(f"specserver: invalid settings: {exc.errors()[0]['msg']}", err=True)
            raise typer.Exit(2) from None
        gc.set_threshold(*GC_THRESHOLDS)  # why: settings.GC_THRESHOLDS
        url = f"http://{host}:{port}"
        from specserver.store.database import display_url

        _preflight_store(settings)
        typer.echo(f"specserver {url} (store: {display_url(settings.resolved_database_url)})")
        uvicorn.run(
            create_app(settings),
            host=host,
            port=port,
            log_level=log_level,
            access_log=False,
            server_header=False,
            # X-Forwarded-For is believed only from SPECSERVER_TRUSTED_PROXIES (ratelimit.py),
            # not uvicorn's default of any loopback peer.
            proxy_headers=False,
        )
