"""One submission's page as the template reads it (``templates/submission.html``): the
conclusion first, then the article-style table, then the details, collapsed.

Plain values for the template to escape; the Python-built fragments (``result.py``,
``breakdown.py``) come as ``Markup``, escaped where they were built.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

from markupsafe import Markup

from specschema.conclusion import interval_method_words
from specschema.engines import descriptor
from specschema.protocol_files import find_protocol, headline_of, interval_of
from specschema.verdicts import between_runs_words
from specserver.http.page import breakdown, result
from specserver.store import queries

# How a redacted model name reads on the page (the view holds null there).
HIDDEN_TEXT = "(hidden)"


def when(value: Any) -> str:
    """An ISO timestamp as 'YYYY-MM-DD HH:MM UTC' (the store keeps UTC)."""
    return "–" if value is None else f"{str(value)[:16].replace('T', ' ')} UTC"


def engine_words(row: dict[str, Any]) -> str:
    """"Ollama 0.30.1" or "llama-server b6123 (ggml, <build>)": the engine that ran."""
    name = descriptor(row["engine"]).label
    extra = ", ".join(str(v) for v in (row.get("engine_runtime"), row.get("engine_build")) if v)
    return f"{name} {row['engine_version']}" + (f" ({extra})" if extra else "")


def few_trials(summaries: Sequence[Any]) -> str:
    """"wide with 6 trials" with the count this run has (per config), not a fixed five."""
    counts = sorted({s.trials for s in summaries if s.trials})
    if not counts:
        return "no trials"
    if len(counts) == 1:
        return f"wide with {counts[0]} trials"
    return f"wide with {counts[0]}–{counts[-1]} trials per config"


def client_words(row: dict[str, Any]) -> str:
    """"specsubmit 0.1.0"; a hidden submission's name is redacted, and says so."""
    if row.get("client_name") is None and "client_name" in row.get("redacted", ()):
        return f"{row['client_version']} (name redacted: hidden submission)"
    return f"{row['client_name']} {row['client_version']}"


def subtitle(row: dict[str, Any]) -> str:
    machine = ", ".join(str(v) for v in (
        row["chip"], f"{row['memory_gb']} GB" if row["memory_gb"] is not None else None,
        row["os"]) if v)
    signer = (f"signed by key {str(row['key_id'])[:12]}…" if row["key_id"]
              else "imported reference result, unsigned")
    return (f"{row['protocol_id']} v{row['protocol_version']} · target {row['target_model']} · "
            f"{machine or 'machine not reported'} · {engine_words(row)} · {signer} · "
            f"received {when(row['received_at'])}")


def verify_snippet(base_url: str, submission_id: str, key_id: str) -> str:
    """Python that re-verifies the stored envelope with specschema; tests run it verbatim.

    ``base_url`` is ``settings.public_base_url``, never the request's Host header: the page
    is cached for every visitor under an ETag that ignores Host, so one request with
    ``Host: attacker.example`` made everyone's snippet fetch from there. The
    snippet also checks that the envelope it fetched is this submission's, so a server or
    proxy cannot pass off another validly signed envelope. Values are JSON string
    literals, which are Python string literals too."""
    url = f"{base_url}/v1/submissions/{submission_id}/envelope"
    return (
        "import json, urllib.request\n"
        "from specschema.envelope import verify_envelope\n"
        "from specschema.payload import parse_submission\n\n"
        f"url = {json.dumps(url)}\n"
        "envelope = json.load(urllib.request.urlopen(url))\n"
        "verified = verify_envelope(envelope)  # raises SignatureInvalid if a byte changed\n"
        f"assert verified.key_id == {json.dumps(key_id)}, \"signed by another key\"\n"
        "submission = parse_submission(verified.payload)\n"
        f"assert str(submission.submission_id) == {json.dumps(submission_id)}, "
        "\"another submission's envelope\"\n"
        'print("verified", submission.submission_id, "signed by", verified.key_id)\n'
    )


def page_parts(view: queries.SubmissionView) -> tuple[dict[str, Any], dict[str, Any]]:
    """The submission row and its parts as the page reads them, from the one public view
    (already redacted when hidden): the summaries baseline first, a redacted model name
    as ``HIDDEN_TEXT`` (the page names models in its title and tables)."""
    def shown(row: dict[str, Any], *names: str) -> dict[str, Any]:
        hidden = [n for n in names if n in row.get("redacted", ()) and row.get(n) is None]
        return {**row, **dict.fromkeys(hidden, HIDDEN_TEXT)}

    fingerprint = view.fingerprint["json"] if view.fingerprint is not None else None
    summaries = sorted(view.summary, key=lambda s: (s["role"], s["config_name"]))
    return shown(view.submission, "target_model"), {
        "fingerprint": fingerprint,
        "configs": [shown(c, "model") for c in view.configs],
        "summaries": [shown(s, "model") for s in summaries],
        "trials": view.trials,
    }


def _run_facts(row: dict[str, Any]) -> list[tuple[str, Any]]:
    protocol = find_protocol(str(row["protocol_id"]), int(row["protocol_version"]),
                             str(row["protocol_sha256"]))
    return [
        ("Protocol", f"{row['protocol_id']} v{row['protocol_version']} "
                     f"(sha256 {str(row['protocol_sha256'])[:12]}…)"),
        ("What the protocol measures", None if protocol is None
         else protocol.description),
        ("Target model", row["target_model"]), ("Chip", row["chip"]),
        ("Memory", None if row["memory_gb"] is None else f"{row['memory_gb']} GB"),
        ("OS", row["os"]), ("Engine", engine_words(row)), ("Backend", row["backend"]),
        ("Client", client_words(row)),
        ("Run at", when(row["created_at"])), ("Received", when(row["received_at"])),
        ("All trials measured", row["complete"]),
        ("Source", "signed by the contributor" if row["source"] == "signed"
         else "imported reference result"),
        ("Contributor key", row["key_id"] or "none (unsigned import)"),
    ]


def submission_context(base_url: str, view: queries.SubmissionView) -> dict[str, Any]:
    """What ``submission.html`` shows of one submission (``base_url``: the settings', for
    the verification snippet; never the Host header)."""
    row, parts = page_parts(view)
    sid = str(row["submission_id"])
    protocol = (str(row["protocol_id"]), int(row["protocol_version"]),
                str(row["protocol_sha256"]))
    summaries = result.summaries_of(parts["summaries"])
    evidence = result.evidence_of(parts["configs"])
    baseline = next((s.name for s in summaries if s.role == "baseline"), None)
    version = str(row["engine_version"])
    shipped = find_protocol(*protocol)
    signed = breakdown.submitted(view.envelope)
    method = interval_method_words(interval_of(*protocol),
                                   blocked=any(s.blocks for s in summaries))
    return {
        "title": f"submission {sid[:8]}",
        "sid": sid,
        "row": row,
        "subtitle": subtitle(row),
        "conclusion": Markup(result.conclusion_section(
            summaries, evidence, version, bool(row["complete"]), row.get("engine_log"),
            row["engine"], headline_of(*protocol))),
        "results": Markup(result.results_table(
            summaries, evidence, parts["trials"], version,
            result.levels_of(parts["summaries"]), row["engine"], row.get("engine_log"),
            len(shipped.prompts or ()) or 1 if shipped else 1, headline_of(*protocol))),
        "between_runs": [between_runs_words(str(s["config_name"]), **{
            k: s["between_runs"][k] for k in ("runs", "low", "high")})
            for s in parts["summaries"] if s.get("between_runs")],
        "domains": Markup(breakdown.domain_section(
            signed, {c.name: c.observed for c in summaries})) if signed is not None else "",
        "method": method,
        "few_trials": few_trials(summaries),
        "run": Markup(result.details("The run", result.facts(_run_facts(row)), name="run")),
        "fingerprint": Markup(result.details(
            "Machine fingerprint (as sent)",
            result.facts(result.flatten("", parts["fingerprint"] or {})), name="fingerprint")),
        "trials": Markup(result.details(
            f"Trials ({len(parts['trials'])}, in run order)",
            result.trials_table(parts["trials"], baseline), name="trials")),
        "raw": Markup(result.details(
            "Raw stored fields", '<p class="note">The stored rows under their column names, '
            "as in the export.</p>" + result.raw_fields(parts["configs"],
                                                         parts["summaries"]), name="raw")),
        "history": [{"when": when(h["at"]), **h} for h in view.moderation],
        "verify": (verify_snippet(base_url, sid, str(row["key_id"])) if row["key_id"]
                   else None),
        "same_chip": "/?" + urlencode({"chip": row["chip"] or ""}),
    }
