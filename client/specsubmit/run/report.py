"""Terminal rendering of a result: the article-style table, the per-trial table and one
plain-language conclusion. The words are chosen by the pure functions of
``specschema.conclusion`` (shared with the server's submission page); ``verdict_label`` and
``conclusion`` here only look up a config's evidence, and ``render_result`` lays them out.

Rule: a draft whose verdict is ``not_applied`` is never called a speedup or a slowdown.
Whatever its ratio, that ratio is run-to-run noise, and the text says so with the spread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specschema import ConfigSummary, SpeculationEvidence, Submission, summarize
from specschema import conclusion as wording
from specschema.breakdown import (
    NO_POSITIONS,
    Acceptance,
    acceptance_of,
    acceptance_words,
    domain_results,
)
from specschema.capability import submission_counter_problems
from specschema.conclusion import speedup_cell
from specschema.domains import domain_label
from specschema.engines import descriptor
from specschema.protocol_files import headline_of
from specschema.stats import decode_tps
from specschema.verdicts import verdict_of
from specsubmit.outside_text import LINE_LIMIT, visible


def _num(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _evidence(submission: Submission, name: str) -> SpeculationEvidence:
    return next(c for c in submission.configs if c.name == name).speculation


def inconsistent_configs(submission: Submission) -> dict[str, str]:
    """{config name: the first shared counter rule it breaks, in words}: the server's own
    rules (``specschema.capability.submission_counter_problems``), run here before any
    verdict is shown or consent asked."""
    found: dict[str, str] = {}
    for problem in submission_counter_problems(submission):
        index = int(problem.path.split(".")[1])
        found.setdefault(submission.configs[index].name, wording.problem_words(problem))
    return found


def verdict_label(submission: Submission, summary: ConfigSummary) -> str:
    return wording.verdict_label(summary, _evidence(submission, summary.name),
                                 inconsistent_configs(submission).get(summary.name),
                                 _headline(submission))


def conclusion(submission: Submission, summaries: Sequence[ConfigSummary] | None = None) -> str:
    """One plain-language paragraph on what speculative decoding did in this run."""
    summaries = list(summaries) if summaries is not None else summarize(submission)
    return wording.conclusion(summaries, {c.name: c.speculation for c in submission.configs},
                              engine_version=submission.engine.version,
                              complete=submission.complete,
                              log_status=submission.engine_log,
                              engine=submission.engine.name,
                              headline=_headline(submission),
                              inconsistent=inconsistent_configs(submission))


def _headline(submission: Submission) -> str:
    ref = submission.protocol
    return headline_of(ref.id, ref.version, ref.sha256)


# Below this many columns the table keeps the config, its headline ratio and its verdict
# only, each wrapping rather than cut: a config's name is never lost to a narrow terminal.
NARROW = 80


def summary_table(submission: Submission, summaries: Sequence[ConfigSummary],
                  width: int | None = None) -> Table:
    engine = descriptor(submission.engine.name).label
    table = Table(title=f"{submission.protocol.id} v{submission.protocol.version} on {engine} "
                        f"{visible(submission.engine.version, 80)}", box=box.SIMPLE_HEAD,
                  caption="ratios to the baseline with their 95% within-run CI; wall time "
                          "includes the prompt")
    # Both speedups side by side, the protocol's headline first.
    speedups: list[tuple[str, Callable[[ConfigSummary], str]]] = [
        ("tok/s vs baseline", speedup_cell),
        ("wall vs baseline", lambda summary: speedup_cell(summary, wall=True))]
    if _headline(submission) == "wall":
        speedups.reverse()
    if width is not None and width < NARROW:
        name, show = speedups[0]
        table.add_column("Config", overflow="fold", ratio=2)
        table.add_column(name, justify="right", overflow="fold", ratio=2)
        table.add_column("Verdict", overflow="fold", ratio=3)
        for summary in summaries:
            table.add_row(summary.name, show(summary), verdict_label(submission, summary))
        return table
    for column in ("Config", "Median wall (s)", "Median eval (s)", "Median tok/s",
                   *(name for name, _ in speedups), "Verdict"):
        fixed = column in ("Config", "Verdict", "Median tok/s") or column.endswith("baseline")
        table.add_column(column, no_wrap=fixed,
                         justify="left" if column in ("Config", "Verdict") else "right")
    for summary in summaries:
        table.add_row(summary.name, _num(summary.median_wall_s), _num(summary.median_eval_s),
                      _num(summary.median_tps), *(show(summary) for _, show in speedups),
                      verdict_label(submission, summary))
    return table


def drift_line(summaries: Sequence[ConfigSummary]) -> str | None:
    """What the baseline's blocks say about the run (with blocks only): the block farthest
    off the line between its neighbours, or (a run without times) their drift."""
    baseline = next((s for s in summaries if s.role == "baseline"), None)
    words = wording.stability_words(baseline)
    if words is None:
        return None
    return f"Stability: {words} (beyond them the drafts are unstable)."


def trial_table(submission: Submission) -> Table:
    table = Table(title="Trials (in run order)", box=box.SIMPLE_HEAD)
    for column in ("#", "Config", "Trial", "Block", "Wall s", "TTFT s", "Eval s", "tok/s",
                   "Load ms", "Cold", "Done", "Output"):
        table.add_column(column, no_wrap=True,
                         justify="left" if column in ("Config", "Done", "Output") else "right")
    baseline = next((c for c in submission.configs if c.role == "baseline"), None)
    reference = {t.output_sha256 for t in baseline.trials} if baseline else set()
    rows = sorted(((t.position, c.name, t) for c in submission.configs for t in c.trials),
                  key=lambda r: r[0])
    for position, name, trial in rows:
        same = "same" if trial.output_sha256 in reference else "differs"
        table.add_row(str(position + 1), name, str(trial.index + 1),
                      "—" if trial.block is None else str(trial.block + 1), f"{trial.wall_s:.2f}",
                      _num(trial.ttft_s, 2), f"{trial.eval_duration_ns / 1e9:.2f}",
                      _num(decode_tps(trial.eval_count, trial.eval_duration_ns)),
                      f"{trial.load_duration_ns / 1e6:.0f}", "cold" if trial.cold else "",
                      visible(trial.done_reason or "—", 40), f"{trial.output_chars} ch, {same}")
    return table


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def domain_table(submission: Submission, summaries: Sequence[ConfigSummary]) -> Table | None:
    """Per kind of work of the protocol's prompt set: each speculating config's speedup
    (only where its verdict is a measured one: confirmed) and its share of drafted tokens
    accepted. None without a prompt set."""
    verdicts = {s.name: s.observed for s in summaries}
    rows = []
    for config in submission.configs:
        if config.role != "draft" or not config.trials:
            continue
        found = domain_results(submission, config)
        if not found:
            return None
        rows.append((config.name, verdicts.get(config.name), found))
    if not rows:
        return None
    table = Table(title="Per kind of work: speedup (tok/s vs baseline) and tokens accepted",
                  box=box.SIMPLE_HEAD,
                  caption="a speedup only for confirmed configs; — where nothing was measured")
    table.add_column("Config", no_wrap=True)
    for result in rows[0][2]:
        table.add_column(domain_label(result.domain), justify="right")
    for name, observed, results in rows:
        cells = []
        for result in results:
            speed = (f"{result.speedup_tps:.2f}x" if verdict_of(observed or "").counts
                     and result.speedup_tps is not None else "—")
            accepted = result.acceptance.rate if result.acceptance is not None else None
            cells.append(f"{speed} {_share(accepted)}")
        table.add_row(name, *cells)
    return table


def acceptance_lines(submission: Submission) -> list[str]:
    """Per speculating config with counters: tokens per round and acceptance by draft
    position (what travels between machines), in words."""
    lines = []
    for config in submission.configs:
        found: Acceptance | None = acceptance_of(config.trials)
        if config.role != "draft" or found is None:
            continue
        if not found.drafted:
            lines.append(f"{config.name}: drafted nothing")
            continue
        text = f"{config.name}: {acceptance_words(found)}"
        if found.per_position:
            shown = " ".join(f"{a:.2f}" for a in found.per_position[:16])
            text += f"; acceptance by draft position: {shown}"
        else:
            text += f"; {NO_POSITIONS}"
        lines.append(text)
    return lines


def report_console(*, stderr: bool = False) -> Console:
    """A console for the report; 120 columns when it is not a terminal (files, pipes)."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=120)
    return console


def render_result(submission: Submission, console: Console) -> None:
    summaries = summarize(submission)
    # The note can quote an engine's error: shown through visible, and never read as markup.
    note = escape(visible(submission.note, LINE_LIMIT)) if submission.note else ""
    if not submission.complete:
        console.print(f"[bold yellow]Incomplete result[/]: {note or 'stopped early'}")
    elif submission.note:
        console.print(f"[yellow]Note[/]: {note}", highlight=False)
    console.print(summary_table(submission, summaries, console.width))
    console.print(trial_table(submission))
    domains = domain_table(submission, summaries)
    if domains is not None:
        console.print(domains)
    for line in acceptance_lines(submission):
        console.print(line, highlight=False, soft_wrap=True)
    stability = drift_line(summaries)
    if stability:
        console.print(stability, highlight=False)
    console.print(escape(visible(conclusion(submission, summaries), LINE_LIMIT * 4)),
                  soft_wrap=False, highlight=False)
