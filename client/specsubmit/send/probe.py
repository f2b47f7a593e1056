"""Sign, ask, send a cost probe: the same key, consent and delivery as a result.

A probe is its own kind (``specschema.probe``): signed into an envelope of its own type,
POSTed to ``/v1/probes``, idempotent by probe id on the server. The consent screen names
every part it carries, as a result's does; nothing is sent without ``--yes`` or a yes at
the prompt. A probe that could not be delivered stays saved where ``specsubmit probe`` put
it, to send again with ``specsubmit probe --send FILE``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from specschema import envelope_bytes, key_id_of, sign_envelope
from specschema.engines import descriptor
from specschema.probe import PROBE_PAYLOAD_TYPE, CostProbe, probe_bytes
from specsubmit.errors import RunAborted
from specsubmit.local import keys
from specsubmit.outside_text import LINE_LIMIT, visible
from specsubmit.send.consent import NOT_SENT, cpu_gpu_line, machine_line
from specsubmit.send.delivery import Receipt, RetryPolicy, post_envelope
from specsubmit.send.logwatch import check_on_contact
from specsubmit.send.submit import SERVER_ENV, Ask, Echo, _tty_ask, resolve_server

PROBES_PATH = "/v1/probes"


def probe_consent_lines(probe: CostProbe, server: str, key_id: str) -> list[str]:
    """Every part the probe's payload carries."""
    engine, target = probe.engine, probe.target
    sizes = ", ".join(str(p.tokens) for p in probe.points)
    lines = [
        f"This probe would be sent to {server}{PROBES_PATH},",
        f"signed with your pseudonymous key {key_id[:16]}…",
        f"  machine   {machine_line(probe.fingerprint)}",
        f"            {cpu_gpu_line(probe.fingerprint)}",
        f"  engine    {descriptor(engine.name).label} {engine.version}"
        + (f", build {engine.build!r}" if engine.build else "")
        + (f", {engine.backend}" if engine.backend else ""),
        f"  target    {target.name}"
        + (f" (sha256 {target.digest})" if target.digest else "")
        + (f", {target.quantization}" if target.quantization else "")
        + (f", {target.size_bytes} bytes" if target.size_bytes else ""),
        f"  timings   seconds per forward pass over k new tokens after {probe.context_tokens} "
        f"tokens of context, k = {sizes}; seconds per decoding step"
        + (f"; {probe.threads} threads" if probe.threads else ""),
        f"  probe     id {probe.probe_id}, {probe.created_at:%Y-%m-%d %H:%M} UTC, "
        f"{probe.client.name} {probe.client.version}",
        NOT_SENT,
    ]
    return [visible(line, LINE_LIMIT) for line in lines]


def send_probe(probe: CostProbe, server: str, policy: RetryPolicy | None = None) -> Receipt:
    envelope = envelope_bytes(sign_envelope(probe_bytes(probe), keys.load_or_create(),
                                            PROBE_PAYLOAD_TYPE))
    return post_envelope(envelope, server, str(probe.probe_id), policy,
                         path=PROBES_PATH, id_field="probe_id")


def offer_probe(probe: CostProbe, saved: Path, *, assume_yes: bool, no_submit: bool,
                server: str | None = None, ask: Ask | None = None,
                policy: RetryPolicy | None = None, echo: Echo | None = None) -> bool:
    """Show what would be sent, ask, send; True when the server has it. Output on stderr."""
    say: Echo = echo or (lambda line: typer.echo(line, err=True))
    later = f"; to send it later: specsubmit probe --send {saved} --server URL"
    if no_submit:
        say(f"Not sent (--no-submit){later}")
        return False
    target = resolve_server(server)
    if target is None:
        say(f"Not sent: no server configured (--server URL or {SERVER_ENV}){later}")
        return False
    key = keys.load_or_create()
    for line in probe_consent_lines(probe, target, key_id_of(bytes(key.verify_key))):
        say(line)
    if not assume_yes:
        import sys

        if ask is None and not sys.stdin.isatty():
            say(f"Not sent: no terminal to ask for consent and no --yes{later}")
            return False
        try:
            agreed = (ask or _tty_ask)("Send this probe?")
        except typer.Abort:
            say("")
            raise RunAborted(f"interrupted at the consent prompt: not sent{later}") from None
        if not agreed:
            say(f"Not sent{later}")
            return False
    receipt = send_probe(probe, target, policy)
    verb = "sent" if receipt.status == 201 else "already sent"
    say(f"probe {verb}: {visible(receipt.submission_id, 80)} to {target}")
    check_on_contact(target, say)
    return True
