"""Terminal rendering of a result: the article-style table, the per-trial table and one
plain-language conclusion. The words are chosen by pure functions (``verdict_label``,
``conclusion``) that tests call directly; ``render_result`` only lays them out.

Rule: a draft whose verdict is ``not_applied`` is never called a speedup or a slowdown.
Whatever its ratio, that ratio is run-to-run noise, and the text says so with the spread.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table

from specschema import ConfigSummary, Submission, summarize
from specschema.stats import decode_tps
from specsubmit.run.evidence import capability_reason


def _x(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def _num(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def vs_baseline(summary: ConfigSummary) -> str:
    if summary.role == "baseline":
        return "1.00x"
    if summary.speedup_tps is None:
        return "—"
    if summary.speedup_tps_ci_low is None or summary.speedup_tps_ci_high is None:
        return _x(summary.speedup_tps)
    return (f"{summary.speedup_tps:.2f}x "
            f"[{summary.speedup_tps_ci_low:.2f}–{summary.speedup_tps_ci_high:.2f}]")


def verdict_label(submission: Submission, summary: ConfigSummary) -> str:
    if summary.role == "baseline":
        return "baseline"
    config = next(c for c in submission.configs if c.name == summary.name)
    evidence = config.speculation
    if evidence.observed == "confirmed":
        if evidence.drafted_tokens:
            rate = (evidence.accepted_tokens or 0) / evidence.drafted_tokens
            return f"confirmed ({rate:.0%} accepted)"
        return "confirmed"
    return {"not_applied": "not applied (noise)", "not_observed": "not observed",
            "unknown": "unknown"}[evidence.observed]


def _spread(summary: ConfigSummary) -> str:
    if summary.min_tps is None or summary.max_tps is None:
        return "no trials"
    text = f"{summary.min_tps:.1f}–{summary.max_tps:.1f} tok/s"
    if summary.cv_tps is not None:
        text += f", CV {summary.cv_tps:.1%}"
    return text


def _effect(summary: ConfigSummary) -> str:
    """Faster/slower/no clear difference, only for configs where speculation can act."""
    ratio, low, high = summary.speedup_tps, summary.speedup_tps_ci_low, summary.speedup_tps_ci_high
    if ratio is None:
        return "no trials to compare"
    if low is None or high is None:
        return f"{ratio:.2f}x the baseline's tok/s (too few trials for an interval)"
    interval = f"95% CI {low:.2f}–{high:.2f}"
    if low > 1.0:
        return f"{ratio:.2f}x faster than the baseline ({interval})"
    if high < 1.0:
        return f"slower than the baseline: {ratio:.2f}x ({interval})"
    return f"no clear difference from the baseline: {ratio:.2f}x ({interval} includes 1.00)"


def config_sentence(submission: Submission, summary: ConfigSummary,
                    baseline: ConfigSummary | None) -> str:
    config = next(c for c in submission.configs if c.name == summary.name)
    evidence = config.speculation
    version = submission.engine.version
    if evidence.observed == "not_applied":
        base = f"; baseline {_spread(baseline)}" if baseline else ""
        ratio = f"its {summary.speedup_tps:.2f}x" if summary.speedup_tps is not None else "any"
        reason = capability_reason(evidence.mechanism, version)
        sentence = (f"{summary.name} was not applied: {reason}, "
                    f"so {ratio} difference from the baseline is run-to-run noise "
                    f"({_spread(summary)}{base})")
    elif evidence.observed == "confirmed":
        counts = ""
        if evidence.drafted_tokens:
            rate = (evidence.accepted_tokens or 0) / evidence.drafted_tokens
            counts = (f"; {evidence.accepted_tokens} of {evidence.drafted_tokens} drafted tokens "
                      f"accepted ({rate:.0%})")
        sentence = (f"{summary.name} speculated (counters in the server log) and ran "
                    f"{_effect(summary)}{counts}")
    else:
        why = ("no counters were found in the server log" if evidence.observed == "not_observed"
               else "the Ollama version could not be read and no counters were found")
        sentence = (f"{summary.name} could not be checked: {why}, so its {_effect(summary)} "
                    "cannot be attributed to speculation")
    if evidence.outputs_match_baseline is False:
        sentence += "; its output differed from the baseline's"
    return sentence


def conclusion(submission: Submission, summaries: Sequence[ConfigSummary] | None = None) -> str:
    """One plain-language paragraph on what speculative decoding did in this run."""
    summaries = list(summaries) if summaries is not None else summarize(submission)
    baseline = next((s for s in summaries if s.role == "baseline"), None)
    drafts = [s for s in summaries if s.role == "draft"]
    done = sum(s.trials for s in summaries)
    prefix = "" if submission.complete else f"Incomplete run ({done} trials measured). "
    if baseline is None or not baseline.trials:
        return prefix + "No baseline trials were measured, so nothing can be compared."
    sentences = [config_sentence(submission, s, baseline) for s in drafts]
    if drafts and all(
        next(c for c in submission.configs if c.name == s.name).speculation.observed
        == "not_applied" for s in drafts
    ):
        lead = ("Speculative decoding did not run in this test: Ollama "
                f"{submission.engine.version} applied none of the drafts, so every config "
                "measured the same thing. ")
    else:
        lead = ""
    return prefix + lead + "; ".join(sentences) + "."


def summary_table(submission: Submission, summaries: Sequence[ConfigSummary]) -> Table:
    table = Table(title=f"{submission.protocol.id} v{submission.protocol.version} on Ollama "
                        f"{submission.engine.version}", box=box.SIMPLE_HEAD)
    for column in ("Config", "Median wall (s)", "Median eval (s)", "Median tok/s",
                   "vs baseline [95% CI]", "Verdict"):
        table.add_column(column, no_wrap=column == "Config",
                         justify="left" if column in ("Config", "Verdict") else "right")
    for summary in summaries:
        table.add_row(summary.name, _num(summary.median_wall_s), _num(summary.median_eval_s),
                      _num(summary.median_tps), vs_baseline(summary),
                      verdict_label(submission, summary))
    return table


def trial_table(submission: Submission) -> Table:
    table = Table(title="Trials (in run order)", box=box.SIMPLE_HEAD)
    for column in ("#", "Config", "Trial", "Wall s", "TTFT s", "Eval s", "tok/s",
                   "Load ms", "Cold", "Done", "Output"):
        table.add_column(column, no_wrap=True,
                         justify="left" if column in ("Config", "Done", "Output") else "right")
    baseline = next((c for c in submission.configs if c.role == "baseline"), None)
    reference = {t.output_sha256 for t in baseline.trials} if baseline else set()
    rows = sorted(((t.position, c.name, t) for c in submission.configs for t in c.trials),
                  key=lambda r: r[0])
    for position, name, trial in rows:
        same = "same" if trial.output_sha256 in reference else "differs"
        table.add_row(str(position + 1), name, str(trial.index + 1), f"{trial.wall_s:.2f}",
                      _num(trial.ttft_s, 2), f"{trial.eval_duration_ns / 1e9:.2f}",
                      _num(decode_tps(trial.eval_count, trial.eval_duration_ns)),
                      f"{trial.load_duration_ns / 1e6:.0f}", "cold" if trial.cold else "",
                      trial.done_reason or "—", f"{trial.output_chars} ch, {same}")
    return table


def report_console(*, stderr: bool = False) -> Console:
    """A console for the report; 120 columns when it is not a terminal (files, pipes)."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=120)
    return console


def render_result(submission: Submission, console: Console) -> None:
    summaries = summarize(submission)
    if not submission.complete:
        console.print(f"[bold yellow]Incomplete result[/]: {submission.note or 'stopped early'}")
    elif submission.note:
        console.print(f"[yellow]Note[/]: {submission.note}", highlight=False)
    console.print(summary_table(submission, summaries))
    console.print(trial_table(submission))
    console.print(conclusion(submission, summaries), soft_wrap=False, highlight=False)
