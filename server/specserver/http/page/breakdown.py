"""The submission page's result per kind of work and its acceptance per draft position
(pure: the stored envelope in, escaped HTML out), the same numbers ``specsubmit run``
prints (``specschema.breakdown``).

They come from the signed submission itself (its trials' prompt indices and per-trial
counters), read from the stored envelope; a hidden submission has no public envelope, and
the section is left out. A speedup is shown only for a config whose verdict, as this
server decided it, is a measured one (confirmed); the others show what was seen: tokens
drafted and accepted, or nothing.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from html import escape
from typing import Any

from specschema.breakdown import NO_POSITIONS, acceptance_of, acceptance_words, domain_results
from specschema.domains import domain_label
from specschema.envelope import verify_envelope
from specschema.errors import SpecSchemaError
from specschema.models import Submission
from specschema.payload import parse_submission
from specschema.verdicts import verdict_of


def submitted(envelope: Mapping[str, Any]) -> Submission | None:
    """The submission the stored envelope signs; None when it is not public (hidden) or
    cannot be read (the page then shows the stored rows only)."""
    body = envelope.get("body")
    if not isinstance(body, str):
        return None
    try:
        verified = verify_envelope(json.loads(base64.b64decode(body)))
        return parse_submission(verified.payload)
    except (SpecSchemaError, ValueError):
        return None


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def domain_section(submission: Submission, verdicts: Mapping[str, str]) -> str:
    """A table per kind of work (protocols with a prompt set) and one line per speculating
    config on its acceptance by draft position; "" when there is nothing to show."""
    out: list[str] = []
    rows: list[str] = []
    head: list[str] = []
    for config in submission.configs:
        if config.role != "draft" or not config.trials:
            continue
        results = domain_results(submission, config)
        if not results:
            break
        head = [f"<th>{escape(domain_label(r.domain))}</th>" for r in results]
        confirmed = verdict_of(verdicts.get(config.name) or "").counts  # a measured speedup
        cells = []
        for r in results:
            speed = (f"{r.speedup_tps:.2f}x" if confirmed and r.speedup_tps is not None
                     else "—")
            rate = r.acceptance.rate if r.acceptance is not None else None
            cells.append(f'<td class="num">{speed}<br><small>{_share(rate)} accepted'
                         "</small></td>")
        rows.append(f"<tr><td>{escape(config.name)}</td>{''.join(cells)}</tr>")
    if rows:
        out.append("<h2>Per kind of work</h2>")
        out.append('<div class="scroll"><table class="domains"><tr><th>Config</th>'
                   + "".join(head) + "</tr>" + "".join(rows) + "</table></div>")
        out.append('<p class="note">Decode speedup against the baseline\'s answers to the '
                   "same prompts, for configs whose speculation was confirmed (— where "
                   "nothing was measured), and the share of drafted tokens accepted.</p>")
    lines = []
    for config in submission.configs:
        found = acceptance_of(config.trials)
        if config.role != "draft" or found is None or not found.drafted:
            continue
        text = f"{escape(config.name)}: {escape(acceptance_words(found))}"
        if found.per_position:
            bars = "".join(
                f'<span class="pos" title="position {i + 1}: {a:.2f}" '
                f'style="--a:{a:.3f}">{a:.2f}</span>' for i, a in enumerate(found.per_position))
            text += f'; acceptance by draft position: <span class="positions">{bars}</span>'
        else:
            text += f"; {NO_POSITIONS}"
        lines.append(f"<li>{text}</li>")
    if lines:
        out.append("<h2>Acceptance</h2><ul class=\"acceptance\">" + "".join(lines) + "</ul>")
    return "".join(out)
