"""`specsubmit fingerprint [--json]`: what this machine looks like to the benchmark."""

from __future__ import annotations

from typing import Annotated

import typer

from specschema import Fingerprint
from specsubmit.outside_text import LINE_LIMIT, visible
from specsubmit.send import cpu_gpu_line, machine_line


def render(fingerprint: Fingerprint) -> list[str]:
    cpu = fingerprint.cpu
    lines = [
        f"chip            {fingerprint.chip or 'not detected'}",
        f"machine         {machine_line(fingerprint)}",
        f"                {cpu_gpu_line(fingerprint)}",
        f"cpu (raw)       {cpu.brand_raw or 'not detected'}",
        f"memory          {fingerprint.memory_bytes or 'not detected'} bytes"
        + (f" ({fingerprint.memory_gb} GB)" if fingerprint.memory_gb else ""),
    ]
    for index, gpu in enumerate(fingerprint.gpus):
        memory = f", {gpu.memory_bytes} bytes" if gpu.memory_bytes else ""
        driver = f", driver {gpu.driver}" if gpu.driver else ""
        lines.append(f"gpu {index}           {gpu.name_raw or gpu.name}{memory}{driver}")
    lines.append(f"virtualization  {fingerprint.virtualization or 'not detected'}")
    lines.append(f"power           {fingerprint.power_source or 'not detected'}")
    return lines


def register(app: typer.Typer) -> None:
    @app.command("fingerprint")
    def fingerprint(
        json_out: Annotated[bool, typer.Option("--json", help="Print the fingerprint JSON.")]
        = False,
    ) -> None:
        """Show the hardware fingerprint a submission would carry (no names, no serials)."""
        from specsubmit.fingerprint import collect_fingerprint

        found = collect_fingerprint()
        if json_out:
            typer.echo(found.model_dump_json(indent=2))
            return
        for line in render(found):  # names come from the OS's tools: shown, never obeyed
            typer.echo(visible(line, LINE_LIMIT))
