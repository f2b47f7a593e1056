"""The shared counter rules run in the client before a verdict is shown and before consent:
a log that claims more accepted tokens than were generated is ``inconsistent`` here, with
the server's rule named, and is never offered for submission (the server would refuse it,
422, with the same rule, path and message)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from specschema import Fingerprint, get_protocol
from specschema.capability import submission_counter_problems
from specserver.ingest import rules
from specsubmit.engines.ollama.client import OllamaClient
from specsubmit.engines.ollama.engine import OllamaEngine, OllamaLog
from specsubmit.errors import SubmitError
from specsubmit.run.report import conclusion, inconsistent_configs, summary_table
from specsubmit.run.runner import RunListener, RunSettings, run_protocol
from specsubmit.send.submit import check_submittable, offer_submission
from tests.fakeollama import FakeModel, FakeOllama

MTP = "qwen3.5:9b-mtp"


def _run(tmp_path: Path, inflate: int):  # type: ignore[no-untyped-def]
    log = tmp_path / "server.log"
    models = [FakeModel(MTP, mtp=True, acceptance=0.75, tokens_per_s=3000,
                        inflate_accepted=inflate)]
    settings = RunSettings(protocol=get_protocol("ollama-draft"), target=MTP)
    with FakeOllama(version="0.33.1", models=models, log_path=log) as fake, \
            OllamaClient(fake.url, timeout_s=10) as client:
        # settle 5 ms: the fake writes its log lines before it answers (test_runner's _run)
        engine = OllamaEngine(client, settings, OllamaLog(path=log, settle_s=0.005))
        return run_protocol(engine, settings,
                            fingerprint=Fingerprint(memory_gb=24), listener=RunListener())


def test_impossible_counters_are_inconsistent_before_any_verdict_or_consent(
        tmp_path: Path) -> None:
    # spec_8 accepts 171 of 232 drafted tokens per 200-token trial; its log claims 211: more
    # accepted than generated (the 280-of-200 case), though fewer than drafted.
    sub = _run(tmp_path, inflate=40).submission
    assert sub.complete
    problems = submission_counter_problems(sub)
    assert problems, "an inflated log must break a counter rule"
    # The server refuses it with exactly these (rule, path, message).
    ctx = rules.RuleContext(get_protocol("ollama-draft"), datetime.now(UTC),
                             timedelta(days=30), timedelta(minutes=5))
    server = [(v.rule, v.path, v.message) for v in rules.violations(sub, ctx)
              if v.rule in ("counters_consistent", "speculation_coherent")]
    local = [(p.rule, p.path, p.message) for p in problems]
    # (the server stops listing at MAX_VIOLATIONS; each it lists, the client found)
    assert server and set(server) <= set(local)
    named = inconsistent_configs(sub)
    assert named == {"spec_8": "counters_consistent (configs.2.trials.0.counters.accepted: "
                               "211 accepted > 200 generated (eval_count))"}
    words = conclusion(sub)
    assert "spec_8 is inconsistent: its counters break the shared rule counters_consistent" in words
    assert "spec_4 speculated" in words
    from rich.console import Console

    console = Console(width=400, record=True)
    console.print(summary_table(sub, __import__("specschema").summarize(sub)))
    assert "inconsistent (counters_consistent" in console.export_text()
    asked: list[str] = []
    with pytest.raises(SubmitError, match="counters break the shared rule counters_consistent"):
        offer_submission(sub, tmp_path / "r.json", assume_yes=False, no_submit=False,
                         print_payload=False, server="http://127.0.0.1:9",
                         ask=lambda prompt: asked.append(prompt) or True, echo=lambda _: None)
    assert asked == []  # never to the consent screen
    with pytest.raises(SubmitError, match="it is kept locally"):
        check_submittable(sub, tmp_path / "r.json")


def test_plausible_counters_pass_the_local_check(tmp_path: Path) -> None:
    sub = _run(tmp_path, inflate=0).submission
    assert submission_counter_problems(sub) == [] and inconsistent_configs(sub) == {}
    check_submittable(sub)
