"""`specsubmit protocols [--json]`, and a protocol as one run makes it from the command
line (``--protocol``, ``--draft``, ``--configs``).

The listing reads each protocol's data: its engine, its configs with their mechanisms and
speculative settings, its prompt set's kinds of work (``specschema.domains``).
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.padding import Padding

from specschema import Protocol, ProtocolError, get_protocol, shipped_protocols
from specschema.domains import domain_label
from specschema.engines import ENGINES, descriptor
from specschema.speculation import spec_type_of
from specsubmit.errors import UsageError


def shipped(protocol_id: str) -> Protocol:
    try:
        return get_protocol(protocol_id)
    except ProtocolError as exc:
        raise UsageError(exc.message) from None


def for_run(protocol: Protocol, *, engine: str, draft: str | None,
            configs: str | None) -> tuple[Protocol, dict[str, str]]:
    """The protocol as this run makes it (``Protocol.for_run``) and the run parameters to
    record; a protocol for another engine, a --draft it cannot take, or --configs naming
    configs it does not have are refused before anything starts."""
    runs_on = protocol.engine_name
    if runs_on is not None and runs_on != engine:
        fits = sorted(p.id for p in shipped_protocols().values() if p.engine_name == engine)
        raise UsageError(
            f"protocol {protocol.id} runs on {descriptor(runs_on).label}, not "
            f"{descriptor(engine).label}"
            + (f": use --protocol {' or '.join(fits)}" if fits else ""))
    parameters: dict[str, str] = {}
    if draft is not None:
        if "draft" not in protocol.draft_parameters:
            raise UsageError(f"protocol {protocol.id} names its own drafts: it takes no "
                             "--draft")
        if not (0 < len(draft) <= 120 and draft.strip() == draft and draft.isprintable()):
            raise UsageError(f"--draft {draft!r} is not a model name or path (1 to 120 "
                             "characters)")
        parameters["draft"] = draft
    if configs is not None:
        names = [name.strip() for name in configs.split(",") if name.strip()]
        if not names:
            raise UsageError("--configs names no config")
        parameters["configs"] = ",".join(dict.fromkeys(names))
    try:
        run = protocol.for_run(parameters)
    except ProtocolError as exc:
        raise UsageError(exc.message) from None
    if not any(c.role == "draft" for c in run.configs):
        raise UsageError(f"protocol {protocol.id}: no config left to compare with the "
                         "baseline (a draft config needs --draft)")
    return run, parameters


def _versioned_by(mechanism: str) -> str:
    """The engines whose versions decide whether ``mechanism`` acts (their descriptors)."""
    labels = [d.label for d in ENGINES.values() if d.rule(mechanism).since is not None]
    return " or ".join(labels) or "the engine"


def _spec_type(protocol: Protocol, name: str) -> str | None:
    config = protocol.config(name)
    return spec_type_of(config.mechanism, protocol.request_options(config), config.draft_model)


def as_data(protocol: Protocol) -> dict[str, Any]:
    """One protocol for ``protocols --json``."""
    return {
        "id": protocol.id, "version": protocol.version, "sha256": protocol.sha256,
        "engine": protocol.engine_name,
        "target": protocol.target,
        "run_parameters": ["target"] * (protocol.target is None)
        + list(protocol.draft_parameters),
        "mechanisms": sorted({c.mechanism for c in protocol.configs if c.role == "draft"}),
        "configs": [{"name": c.name, "role": c.role, "mechanism": c.mechanism,
                     "spec_type": _spec_type(protocol, c.name), "draft_model": c.draft_model,
                     "options": {**c.extra_options, **c.request_fields}}
                    for c in protocol.configs],
        "domains": list(protocol.domains),
        "trials_per_config": protocol.trials_per_config,
        "order": protocol.order,
        "num_predict": protocol.options.num_predict,
        "description": protocol.description,
    }


def _describe(protocol: Protocol, console: Console) -> None:
    console.print(f"[bold]{protocol.id}[/] v{protocol.version}  sha256 {protocol.sha256[:12]}")

    def indented(text: str) -> None:
        console.print(Padding(text, (0, 0, 0, 2), expand=False), highlight=False)

    indented(protocol.description)
    if protocol.engine_name:
        indented(f"engine: {descriptor(protocol.engine_name).label}")
    indented(f"target: {protocol.target or 'required: --target MODEL'}")
    for config in protocol.configs:
        extra = {**config.extra_options, **config.request_fields}
        fields = ", ".join(f"{k}={v}" for k, v in extra.items()) or "no extra options"
        draft = (f"; draft from --{config.draft_model[1:]}"
                 if config.draft_model and config.draft_model.startswith("$") else "")
        indented(f"- {config.name} ({config.role}, {config.mechanism}): {fields}{draft}")
    if protocol.domains:
        indented("kinds of work: " + ", ".join(domain_label(d) for d in protocol.domains)
                 + " (one prompt each, every block answers each once)")
    indented(f"{protocol.warmups_per_config} warm-up + {protocol.trials_per_config} trials "
             f"per config, {protocol.order} order, num_predict {protocol.options.num_predict}")
    req = protocol.requirements
    needs = [f"{_versioned_by(k)} >= {v} for {k}" for k, v in req.min_engine_version.items()]
    if req.memory_bytes:
        needs.append(f"about {req.memory_bytes / 1e9:.0f} GB of memory")
    if req.target_note:
        needs.append(f"target: {req.target_note}")
    indented(f"requires: {'; '.join(needs) or 'nothing special'}")
    console.print()


def register(app: typer.Typer) -> None:
    @app.command("protocols")
    def protocols(json_out: Annotated[bool, typer.Option(
            "--json", help="Print the protocols as JSON on stdout.")] = False) -> None:
        """List the shipped trial protocols."""
        if json_out:
            data = [as_data(p) for p in shipped_protocols().values()]
            sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
            return
        console = Console()
        for proto in shipped_protocols().values():
            _describe(proto, console)


__all__ = ["as_data", "for_run", "register", "shipped"]
