"""`specsubmit keys show|rotate`: the contributor's pseudonymous signing key."""

from __future__ import annotations

from typing import Annotated

import typer

from specsubmit.local import check_state_home, keys

keys_app = typer.Typer(help="Your signing key: its id is your pseudonymous identity.",
                       no_args_is_help=True)


@keys_app.command("show")
def show(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print the key id (hex sha256 of the public key) and the public key (base64); the
    first time, the key is made, and it says so."""
    check_state_home()
    made = not keys.current_exists()
    info = keys.current_info()
    if made:  # on stderr: --json's stdout stays the JSON alone
        typer.echo(f"no key yet: made a new one at {info.path} (it signs your submissions; "
                   "keep it to stay the same contributor)", err=True)
    retired = keys.retired()
    if json_out:
        import json

        typer.echo(json.dumps({
            "key_id": info.key_id, "public_key": info.public_key_b64,
            "retired": [{"key_id": old.key_id, "public_key": old.public_key_b64}
                        for old in retired],
        }, indent=2))
        return
    typer.echo(f"key id      {info.key_id}")
    typer.echo(f"public key  {info.public_key_b64}")
    typer.echo(f"file        {info.path}")
    for old in retired:
        typer.echo(f"retired     {old.key_id}")


@keys_app.command("rotate")
def rotate() -> None:
    """Make a new key; the old one is kept as retired."""
    check_state_home()
    old, new = keys.rotate()
    typer.echo(f"retired     {old.key_id}  (kept at {old.path})")
    typer.echo(f"key id      {new.key_id}")
    typer.echo(f"public key  {new.public_key_b64}")


def register(app: typer.Typer) -> None:
    app.add_typer(keys_app, name="keys")
