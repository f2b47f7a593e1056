"""Maintainer commands: import-hardnumbers, query, hide, unhide, ban, unban, export,
snapshot, stats.

Two ways to reach the store (docs/maintainers.md):

- ``--server URL`` (env ``SPECSERVER_ADMIN_URL``) with ``SPECSERVER_ADMIN_TOKEN``: the
  running server does the work through its admin API, on its single writer. This is the
  way while a server runs: an embedded DuckDB file admits one process.
- otherwise the command opens the store itself (``--database`` or the server's settings)
  and names it on stderr; if another process holds the DuckDB file, it says so and
  suggests ``--server``. A ``--database`` file whose folder does not exist is refused (a
  typo would otherwise create a new, empty store there).

Every failure is one line on stderr and exit code 1 (2 for bad usage).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from specschema.conclusion import ratio_words
from specserver.cli.admin_client import Admin, AdminError, DirectAdmin, connect
from specserver.errors import SpecServerError
from specserver.licence import SENTENCE
from specserver.settings import legacy_note
from specserver.store import FORMATS

T = TypeVar("T")
EXPORT_FORMATS = tuple(FORMATS)
EXTENSION_FORMATS = {extension: f.name for f in FORMATS.values() for extension in f.extensions}


def export_format(path: Path, fmt: str | None) -> str:
    """--format if given, else the file's extension; UsageError-style line otherwise."""
    if fmt is not None:
        if fmt not in EXPORT_FORMATS:
            raise _UsageProblem(f"--format must be one of {', '.join(EXPORT_FORMATS)}")
        return fmt
    known = EXTENSION_FORMATS.get(path.suffix.lower())
    if known is None:
        raise _UsageProblem(
            f"cannot tell the format of {path.name!r} from its extension "
            f"({', '.join(EXTENSION_FORMATS)}): pass --format {'|'.join(EXPORT_FORMATS)}")
    return known


class _UsageProblem(Exception):
    """Bad usage of a maintainer command: one line, exit 2."""


# --- output -------------------------------------------------------------------------------


def format_table(columns: list[str], rows: list[list[Any]]) -> str:
    cells = [[("NULL" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))
    rule = "  ".join("-" * w for w in widths)
    body = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join([line, rule, *body])


def _action_line(result: dict[str, Any]) -> str:
    state = "done" if result["changed"] else "no change (already so)"
    return f"{result['action']} {result['target']}: {state}"


# --- commands -----------------------------------------------------------------------------

ServerOpt = Annotated[str | None, typer.Option(
    "--server", envvar="SPECSERVER_ADMIN_URL",
    help="URL of the running server (uses its admin API)")]
TokenOpt = Annotated[str | None, typer.Option(
    "--token", envvar="SPECSERVER_ADMIN_TOKEN", show_default=False,
    help="admin bearer token")]
DatabaseOpt = Annotated[str | None, typer.Option(
    "--database", help="store to open when no --server (default: SPECSERVER_DATABASE_URL, "
    "else the data folder)")]
ActorOpt = Annotated[str, typer.Option(
    "--actor", envvar="SPECSERVER_ADMIN_ACTOR", help="name recorded in the audit log")]


def _run(fn: Callable[[], T]) -> T:
    """The one place where maintainer-command failures become a line on stderr."""
    try:
        return fn()
    except _UsageProblem as exc:
        typer.echo(f"specserver: {exc}", err=True)
        raise typer.Exit(2) from None
    except AdminError as exc:
        typer.echo(f"specserver: {exc}", err=True)
    except SpecServerError as exc:
        typer.echo(f"specserver: {exc.message}", err=True)
    except OSError as exc:  # a file the command reads or writes (export's, an import's)
        where = f"{exc.filename}: " if exc.filename else ""
        typer.echo(f"specserver: {where}{exc.strerror or exc}", err=True)
    raise typer.Exit(1)


def _say_store(admin: Admin) -> None:
    """Name the store a command opened itself (not through --server), on stderr: a default
    or a mistyped store must not pass for the intended one."""
    if isinstance(admin, DirectAdmin):
        typer.echo(f"specserver: store {admin.store_name}", err=True)
        note = legacy_note(admin.store_name)
        if note is not None:
            typer.echo(f"specserver: {note}", err=True)


def register(app: typer.Typer) -> None:
    @app.command("import-hardnumbers")
    def import_hardnumbers(
        file: Annotated[Path, typer.Argument(help="a Hard Numbers spec_decode.json")],
        chip: Annotated[str, typer.Option(help="chip of the machine that ran it")],
        memory_gb: Annotated[int, typer.Option("--memory-gb", help="its memory in GB")],
        ollama_version: Annotated[str, typer.Option("--ollama-version",
                                                    help="Ollama version used")],
        os: Annotated[str | None, typer.Option("--os", help="macos|linux|windows|other")] = None,
        source: Annotated[str | None, typer.Option(help="where the file came from")] = None,
        server: ServerOpt = None, token: TokenOpt = None, database: DatabaseOpt = None,
        actor: ActorOpt = "maintainer",
    ) -> None:
        """Import a published Hard Numbers results file as an unsigned reference submission."""
        def work() -> dict[str, Any]:
            try:
                content = file.read_bytes()
            except OSError as exc:
                raise AdminError(f"cannot read {file}: {exc.strerror}") from None
            with connect(server, token, database, actor) as admin:
                return admin.import_hardnumbers(content, source or f"file {file.name}", chip,
                                                memory_gb, ollama_version, os)

        result = _run(work)
        typer.echo(f"imported {result['submission_id']}")
        for s in result["summary"]:
            # Only a confirmed ratio is a speedup; any other is said as what it is.
            speedup = ("" if s["speedup_tps"] is None else
                       f"  speedup {s['speedup_tps']:.3f}x" if s["observed"] == "confirmed" else
                       f"  ratio {ratio_words(s['observed'], s['speedup_tps'])}")
            typer.echo(f"  {s['name']:<22} median {s['median_tps']:.3f} tok/s  wall "
                       f"{s['median_wall_s']:.3f} s  {s['observed']}{speedup}")

    @app.command("query")
    def query(
        sql: Annotated[str, typer.Argument(help="one SELECT statement")],
        as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
        limit: Annotated[int, typer.Option(help="most rows to print")] = 1000,
        server: ServerOpt = None, token: TokenOpt = None, database: DatabaseOpt = None,
        actor: ActorOpt = "maintainer",
    ) -> None:
        """Run one SELECT, read only, at most --limit rows (anything else is refused)."""
        def work() -> dict[str, Any]:
            with connect(server, token, database, actor) as admin:
                _say_store(admin)
                return admin.query(sql, limit)

        result = _run(work)
        if as_json:
            rows = [dict(zip(result["columns"], r, strict=True)) for r in result["rows"]]
            typer.echo(json.dumps(rows, default=str, indent=2))
        else:
            typer.echo(format_table(result["columns"], result["rows"]))
        if result.get("truncated"):
            typer.echo(f"(first {limit} rows)", err=True)

    def _moderate(server: str | None, token: str | None, database: str | None, actor: str,
                  action: Callable[[Any], dict[str, Any]]) -> None:
        """One moderation action through the API or the store, printed as one line."""
        def work() -> dict[str, Any]:
            with connect(server, token, database, actor) as admin:
                return action(admin)

        typer.echo(_action_line(_run(work)))

    @app.command("hide")
    def hide(
        submission_id: Annotated[str, typer.Argument(help="submission id")],
        reason: Annotated[str, typer.Option(help="why (recorded in the audit log)")],
        server: ServerOpt = None, token: TokenOpt = None, database: DatabaseOpt = None,
        actor: ActorOpt = "maintainer",
    ) -> None:
        """Hide a submission from the leaderboard and exports."""
        _moderate(server, token, database, actor, lambda admin: admin.hide(submission_id, reason))

    @app.command("unhide")
    def unhide(
        submission_id: Annotated[str, typer.Argument(help="submission id")],
        reason: Annotated[str | None, typer.Option(help="why")] = None,
        server: ServerOpt = None, token: TokenOpt = None, database: DatabaseOpt = None,
        actor: ActorOpt = "maintainer",
    ) -> None:
        """Show a hidden submission again."""
        _moderate(server, token, database, actor, lambda admin: admin.unhide(submission_id, reason))

    @app.command("quarantine")
    def quarantine(
        as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
        server: ServerOpt = None, token: TokenOpt = None, database: DatabaseOpt = None,
        actor: ActorOpt = "maintainer",
    ) -> None:
        """List the submissions held in quarantine (an implausible result), oldest first,
        with the reason. Release one with `unhide`, keep it off the boards with `reject`."""
        def work() -> list[dict[str, Any]]:
            with connect(server, token, database, actor) as admin:
                return admin.quarantined()

        items = _run(work)
        if as_json:
            typer.echo(json.dumps(items, default=str, indent=2))
            return
        if not items:
            typer.echo("quarantine is empty")
            return
        columns = ["submission_id", "received_at", "chip", "target_model", "reason"]
        typer.echo(format_table(columns, [[item.get(c) for c in columns] for item in items]))

    @app.command("reject")
    def reject(
        submission_id: Annotated[str, typer.Argument(help="submission id (in quarantine)")],
        reason: Annotated[str, typer.Option(help="why (recorded in the audit log)")],
        server: ServerOpt = None, token: TokenOpt = None, database: DatabaseOpt = None,
        actor: ActorOpt = "maintainer",
    ) -> None:
        """Keep a quarantined submission off the boards for good (it stays stored, hidden)."""
        _moderate(server, token, database, actor, lambda admin: admin.reject(submission_id, reason))

    @app.command("ban")
    def ban(
        key_id: Annotated[str, typer.Argument(help="contributor key id (64 hex)")],
        reason: Annotated[str, typer.Option(help="why (recorded in the audit log)")],
        server: ServerOpt = None, token: TokenOpt = None, database: DatabaseOpt = None,
        actor: ActorOpt = "maintainer",
    ) -> None:
        """Refuse a key's new submissions and leave its results out of the leaderboard."""
        _moderate(server, token, database, actor, lambda admin: admin.ban(key_id, reason))

    @app.command("unban")
    def unban(
        key_id: Annotated[str, typer.Argument(help="contributor key id (64 hex)")],
        reason: Annotated[str | None, typer.Option(help="why")] = None,
        server: ServerOpt = None, token: TokenOpt = None, database: DatabaseOpt = None,
        actor: ActorOpt = "maintainer",
    ) -> None:
        """Lift a ban."""
        _moderate(server, token, database, actor, lambda admin: admin.unban(key_id, reason))

    @app.command("export")
    def export(
        path: Annotated[Path, typer.Argument(help="file to write")],
        fmt: Annotated[str | None, typer.Option(
            "--format", help=f"{', '.join(FORMATS)} [default: from the file's extension]")]
        = None,
        server: ServerOpt = None, token: TokenOpt = None, database: DatabaseOpt = None,
        actor: ActorOpt = "maintainer",
    ) -> None:
        """Export the public data: one row per visible submission x config."""
        chosen = _run(lambda: export_format(path, fmt))
        folder = path.parent
        if not folder.is_dir():  # before the store is opened or the server asked
            typer.echo(f"specserver: cannot write {path}: the folder {folder} does not exist",
                       err=True)
            raise typer.Exit(1)

        def work() -> int:
            with connect(server, token, database, actor) as admin:
                return admin.export(chosen, path)

        written = _run(work)
        typer.echo(f"wrote {path} ({written} bytes, {chosen})")
        typer.echo(SENTENCE, err=True)  # stdout stays the one line a script reads

    @app.command("snapshot")
    def snapshot(
        server: ServerOpt = None, token: TokenOpt = None, database: DatabaseOpt = None,
        actor: ActorOpt = "maintainer",
    ) -> None:
        """Write a signed snapshot of the public data now (Parquet and its manifest)."""
        def work() -> dict[str, Any]:
            with connect(server, token, database, actor) as admin:
                _say_store(admin)
                return admin.snapshot()

        result = _run(work)
        typer.echo(f"wrote snapshot {result['file']}: {result['rows']} rows, log size "
                   f"{result['log_size']}, sha256 {result['parquet_sha256']} "
                   f"({result['licence'].split()[0]})")

    @app.command("stats")
    def stats(
        as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
        server: ServerOpt = None, token: TokenOpt = None, database: DatabaseOpt = None,
        actor: ActorOpt = "maintainer",
    ) -> None:
        """Counts: submissions, contributors, trials, hidden, banned keys, verdicts."""
        def work() -> dict[str, Any]:
            with connect(server, token, database, actor) as admin:
                _say_store(admin)
                return admin.stats()

        result = _run(work)
        if as_json:
            typer.echo(json.dumps(result, indent=2, default=str))
            return
        for name, value in result.items():
            if name == "protocols":
                for p in value:
                    typer.echo(f"protocol {p['protocol_id']} v{p['protocol_version']}: "
                               f"{p['submissions']} visible")
            elif name == "draft_verdicts":
                typer.echo("draft verdicts: " + ", ".join(f"{k} {v}" for k, v in value.items()))
            else:
                typer.echo(f"{name.replace('_', ' ')}: {value}")
