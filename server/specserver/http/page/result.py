"""The submission page's result, read like the CLI's (pure: stored rows in, escaped HTML out).

First the conclusion (``specschema.conclusion``, the very words ``specsubmit run`` prints),
then the article-style table with units and each verdict's evidence, split by who vouches
for it: what this server checked itself and what only the client reported. The details (the
machine fingerprint, every trial, the raw stored fields) follow, collapsed.

Every value that came from a contributor goes through ``escape``: the page is public.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from html import escape
from typing import Any

from specschema.conclusion import (
    LEVEL_WORDS,
    capability_reason,
    conclusion,
    config_line,
    drift_words,
    no_counters_reason,
    outcome,
    speedup_cell,
    verdict_label,
)
from specschema.engines import descriptor
from specschema.evidence import CORROBORATED
from specschema.models import SpeculationEvidence
from specschema.summary import ConfigSummary
from specschema.verdicts import OUTCOME_STYLE, verdict_of

LONG_WORD = 24  # characters without a space: longer ones may break anywhere


def text(value: Any) -> str:
    """Escaped contributor text; a pathologically long word may wrap anywhere.

    Only such words get ``span.wrap``: ordinary names keep their width in a table instead of
    being broken mid-word, and one 190-character chip name cannot widen the page.
    """
    shown = escape(word(value))
    if any(len(part) > LONG_WORD for part in word(value).split()):
        return f'<span class="wrap">{shown}</span>'
    return shown


def _num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def word(value: Any) -> str:
    """A stored value as a reader sees it: yes/no, not Python's True/False; – for missing."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def summaries_of(rows: Sequence[dict[str, Any]]) -> list[ConfigSummary]:
    """The stored summary rows (computed by this server from the trials) as summaries."""
    fields = [f for f in ConfigSummary.model_fields if f != "name"]
    return [ConfigSummary(name=r["config_name"], **{f: r.get(f) for f in fields}) for r in rows]


def levels_of(rows: Sequence[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """The stored summary rows' evidence level and reason, by config name."""
    return {r["config_name"]: (str(r.get("evidence") or "none"),
                               str(r.get("evidence_reason") or "not assessed"))
            for r in rows}


def evidence_of(rows: Sequence[dict[str, Any]]) -> dict[str, SpeculationEvidence]:
    """The stored config rows' speculation evidence, by config name."""
    return {r["config_name"]: SpeculationEvidence.model_validate({
        "requested": r["requested"], "mechanism": r["mechanism"],
        "engine_can_honor": r["engine_can_honor"], "observed": r["observed"],
        "drafted_tokens": r["drafted_tokens"], "accepted_tokens": r["accepted_tokens"],
        "counters_source": r["counters_source"],
        "outputs_match_baseline": r["outputs_match_baseline"]}, strict=False) for r in rows}


def outputs_published(trials: Sequence[dict[str, Any]]) -> bool:
    """Imported files carry no output text (output_chars 0 everywhere)."""
    return any(t["output_chars"] for t in trials)


def server_output_check(name: str, trials: Sequence[dict[str, Any]],
                        baseline: str | None, prompts: int = 1) -> str | None:
    """Whether this config's output hashes equal the baseline's most common one for the
    same prompt (``prompts``: the size of the protocol's prompt set; trial i answered
    prompt i % prompts)."""
    if baseline is None or name == baseline or not outputs_published(trials):
        return None
    references: dict[int, Counter[str]] = {}
    for t in trials:
        if t["config_name"] == baseline:
            references.setdefault(int(t["trial_index"]) % prompts, Counter())[
                t["output_sha256"]] += 1
    own = [(int(t["trial_index"]) % prompts, t["output_sha256"]) for t in trials
           if t["config_name"] == name]
    if not references or not own or any(p not in references for p, _ in own):
        return None
    same = sum(h == references[p].most_common(1)[0][0] for p, h in own)
    if same == len(own):
        return "every trial's output is identical to the baseline's"
    return f"{len(own) - same} of {len(own)} outputs differ from the baseline's"


def evidence_lines(summary: ConfigSummary, evidence: SpeculationEvidence | None,
                   engine_version: str, output_check: str | None,
                   level: tuple[str, str] | None = None,
                   engine: str | None = "ollama",
                   log_status: str | None = "read") -> tuple[list[str], list[str]]:
    """(what the server checked, what the client reported), as plain sentences; ``level``
    is the stored evidence level and its reason (``specschema.evidence``); ``engine`` the
    stored engine name, whose descriptor words the engine and its counters; ``log_status``
    the submission's ``engine_log`` (a log never given is not a log without counters)."""
    if summary.role == "baseline" or evidence is None or not evidence.requested:
        return ["no speculation requested: the reference every ratio is taken against"], []
    checked: list[str] = []
    reported: list[str] = []
    described = descriptor(engine)
    reason = capability_reason(evidence.mechanism, engine_version, engine)
    if evidence.engine_can_honor is False:
        checked.append(f"{described.label} {engine_version} cannot honor this request: "
                       f"{reason}")
    elif evidence.engine_can_honor is None:
        checked.append(f"{reason}, so whether it can speculate is not known")
    else:
        checked.append(f"{described.label} {engine_version} can honor this request ({reason})")
    if evidence.drafted_tokens is not None:
        source = described.counters_from(evidence.counters_source)
        reported.append(f"{evidence.accepted_tokens} of {evidence.drafted_tokens} drafted "
                        f"tokens accepted, read from {source}")
        if level is None:
            checked.append("the counters are consistent (accepted ≤ drafted); the server "
                           "cannot see the log itself")
        else:
            name, why = level
            unseen = ("; the server cannot see the log itself"
                      if evidence.counters_source != "engine_api" else "")
            checked.append(f"evidence level {name} ({LEVEL_WORDS.get(name, name)}): "
                           f"{why}{unseen}")
    elif evidence.observed == "incompatible":  # never run: no trials to count anything in
        reported.append("not run: the engine could not run it as the protocol asks, so "
                        "there were no trials to count drafts in")
    elif evidence.engine_can_honor is not False:
        reported.append(no_counters_reason(log_status, "not_observed", engine))
    if output_check is not None:
        checked.append(output_check)
    elif evidence.outputs_match_baseline is not None:
        reported.append("output identical to the baseline's" if evidence.outputs_match_baseline
                        else "output differs from the baseline's")
    return checked, reported


def _evidence_cell(checked: Sequence[str], reported: Sequence[str]) -> str:
    if not reported and len(checked) == 1 and checked[0].startswith("no speculation"):
        return f'<span class="muted">{escape(checked[0])}</span>'  # the baseline: nothing to vouch
    parts = [f'<li><span class="level server">checked by the server</span> {escape(c)}</li>'
             for c in checked]
    parts += [f'<li><span class="level client">reported by the client</span> {escape(r)}</li>'
              for r in reported]
    return f'<ul class="evidence">{"".join(parts)}</ul>'


def conclusion_section(summaries: Sequence[ConfigSummary],
                       evidence: dict[str, SpeculationEvidence], engine_version: str,
                       complete: bool, log_status: str | None = None,
                       engine: str | None = "ollama", headline: str = "decode") -> str:
    """``log_status``: the submission's ``engine_log`` (wire v2), so that a run without a
    log reads "no Ollama server log was given", not "no counters were found"; ``engine``:
    the stored engine name (its descriptor's words)."""
    text = conclusion(summaries, evidence, engine_version=engine_version, complete=complete,
                      log_status=log_status, engine=engine, headline=headline)
    lines = "".join(f'<li class="{line_class(s, evidence.get(s.name))}">'
                    f"{escape(config_line(s, evidence.get(s.name)))}</li>" for s in summaries)
    incomplete = "" if complete else '<li class="incomplete">Incomplete run: not counted</li>'
    drift = drift_words(next((s for s in summaries if s.role == "baseline"), None))
    stability = (f'<p class="note" id="stability">Stability: {escape(drift)}.</p>'
                 if drift else "")
    return (f'<ul class="verdicts" id="conclusion">{incomplete}{lines}</ul>'
            f'<p class="conclusion">{escape(text)}</p>{stability}')


def line_class(summary: ConfigSummary, evidence: SpeculationEvidence | None) -> str:
    """A config's colour on the page: its outcome where speculation is confirmed and
    counted, else its verdict's neutral style (the verdict table's: a not-applied ratio is
    noise, an unchecked one unverified)."""
    if summary.role == "baseline":
        return "baseline"
    observed = evidence.observed if evidence is not None else summary.observed
    style = verdict_of(observed).style
    if style != "effect":
        return style
    return OUTCOME_STYLE[outcome(summary) or "no_clear_difference"]


def results_table(summaries: Sequence[ConfigSummary], evidence: dict[str, SpeculationEvidence],
                  trials: Sequence[dict[str, Any]], engine_version: str,
                  levels: dict[str, tuple[str, str]] | None = None,
                  engine: str | None = "ollama",
                  log_status: str | None = "read", prompts: int = 1,
                  headline: str = "decode") -> str:
    """The article's table: one row per config, in seconds and tok/s, verdict and evidence
    (``prompts``: the size of the protocol's prompt set; ``headline``: the protocol's, whose
    interval says whether a confirmed speedup is resolved)."""
    baseline = next((s.name for s in summaries if s.role == "baseline"), None)
    head = ('<tr><th>Config</th><th class="num">Median wall (s)</th>'
            '<th class="num">Median eval (s)</th><th class="num">Median tok/s</th>'
            '<th class="num">tok/s vs baseline [95% within-run CI]</th>'
            '<th class="num">wall vs baseline, prompt included [95% within-run CI]</th>'
            "<th>Verdict</th><th>Evidence</th></tr>")
    rows = []
    for summary in summaries:
        found = evidence.get(summary.name)
        label = verdict_label(summary, found, headline=headline)
        observed = "baseline" if summary.role == "baseline" else summary.observed
        level = (levels or {}).get(summary.name)
        check = server_output_check(summary.name, trials, baseline, prompts)
        checked, reported = evidence_lines(summary, found, engine_version, check, level,
                                           engine, log_status)
        evidence_level = level[0] if level else "none"
        verdict_class: str = observed
        # The ratio's colour is its outcome, and only for counted confirmed speculation; a
        # not-applied ratio is noise, neutral (a 0.30x slowdown is red however confirmed).
        ratio_class = f"num {line_class(summary, found)}"
        if observed == "confirmed" and level is not None and level[0] not in CORROBORATED:
            label += f" (not counted: {level[0]} counters)"
            verdict_class = "uncorroborated"  # never coloured as a confirmed effect
            ratio_class = "num unverified"
        model = summary.draft_model or summary.model
        rows.append(
            f'<tr class="config" data-observed="{escape(observed)}" '
            f'data-evidence="{escape(evidence_level)}">'
            f'<td><span class="config-name">{text(summary.name)}</span>'
            f'<br><span class="muted">{text(model)}</span></td>'
            f'<td class="num">{_num(summary.median_wall_s)}</td>'
            f'<td class="num">{_num(summary.median_eval_s)}</td>'
            f'<td class="num">{_num(summary.median_tps, 2)}</td>'
            f'<td class="{ratio_class}">{escape(speedup_cell(summary))}</td>'
            f'<td class="{ratio_class}">{escape(speedup_cell(summary, wall=True))}</td>'
            f'<td class="verdict {escape(verdict_class)}">{escape(label)}</td>'
            f"<td>{_evidence_cell(checked, reported)}</td></tr>")
    return f'<div class="scroll"><table class="results">{head}{"".join(rows)}</table></div>'


def trials_table(trials: Sequence[dict[str, Any]], baseline: str | None) -> str:
    """Every trial in run order, in seconds, milliseconds and tok/s (never nanoseconds)."""
    baseline_hashes = {t["output_sha256"] for t in trials if t["config_name"] == baseline}
    published = outputs_published(trials)
    head = ('<tr><th class="num">#</th><th>Config</th><th class="num">Trial</th>'
            '<th class="num">Wall (s)</th><th class="num">First token (s)</th>'
            '<th class="num">Eval (s)</th><th class="num">tok/s</th>'
            '<th class="num">Load (ms)</th><th>Cold load</th><th>Stopped</th>'
            "<th>Output</th></tr>")
    rows = []
    for t in trials:
        eval_s = t["eval_duration_ns"] / 1e9
        tps = t["eval_count"] / eval_s if eval_s > 0 else None
        if published:
            same = "as the baseline" if t["output_sha256"] in baseline_hashes else "differs"
            output = f"{t['output_chars']} chars, {same}"
        else:
            output = "not published"
        rows.append(
            f'<tr><td class="num">{t["position"] + 1}</td><td>{text(t["config_name"])}</td>'
            f'<td class="num">{t["trial_index"] + 1}</td><td class="num">{t["wall_s"]:.2f}</td>'
            f'<td class="num">{_num(t["ttft_s"], 2)}</td><td class="num">{eval_s:.2f}</td>'
            f'<td class="num">{_num(tps, 2)}</td>'
            f'<td class="num">{t["load_duration_ns"] / 1e6:.0f}</td>'
            f'<td>{"cold" if t["cold"] else "warm"}</td>'
            f'<td>{text(t["done_reason"])}</td><td>{escape(output)}</td></tr>')
    return f'<table class="trials">{head}{"".join(rows)}</table>'


def flatten(prefix: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in flatten(f"{prefix}.{k}" if prefix else k, v)]
    if isinstance(value, list):
        if not value:
            return [(prefix, "none")]
        return [p for i, v in enumerate(value) for p in flatten(f"{prefix}[{i}]", v)]
    return [(prefix, value)]


def facts(pairs: Sequence[tuple[str, Any]]) -> str:
    items = "".join(f"<dt>{text(k)}</dt><dd>{text(v)}</dd>" for k, v in pairs)
    return f'<dl class="facts">{items}</dl>'


def raw_fields(configs: Sequence[dict[str, Any]], summaries: Sequence[dict[str, Any]]) -> str:
    """The stored rows under their column names, for whoever checks the export against them
    (JSON columns as stored: compact JSON; not the words the view adds)."""
    out = []
    for kind, rows in (("config", configs), ("summary", summaries)):
        for row in rows:
            out.append(f"<h4>{escape(kind)} {escape(str(row.get('config_name', '')))}</h4>")
            out.append(facts([
                (k, json.dumps(v, separators=(",", ":")) if isinstance(v, dict | list) else v)
                for k, v in row.items() if k not in _NOT_STORED]))
    return "".join(out)


# Keys of a view's rows that are not stored columns of their table (or repeat the heading).
_NOT_STORED = frozenset({"config_name", "submission_id", "verdict_help", "redacted",
                         "between_runs"})


def details(title: str, body: str, *, name: str) -> str:
    return (f'<details class="more" id="{escape(name)}"><summary>{escape(title)}</summary>'
            f"{body}</details>")
