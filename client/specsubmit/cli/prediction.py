"""`specsubmit advise --target NAME --server URL`: what each way to speculate would do on
this machine, from the crowd's acceptance and this machine's cost of checking tokens.

This machine is described by its newest probe of the target (``specsubmit probe``): its
chip, memory and engine go into ``GET /v1/predict``. The prediction printed is computed
here from the inputs the answer carries, by the function the server answers with
(``specschema.forecast``): with the crowd's probes of this target on such a machine when
the server holds some (the same numbers as the API), otherwise, or with ``--probe FILE``,
with the local probe.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from specschema.crowd import ALL_DOMAINS, cost_unit, inputs_from_json
from specschema.domains import DOMAINS, domain_label
from specschema.forecast import LEVEL, forecast
from specschema.probe import PREFILL, VERIFICATION, CostProbe
from specsubmit.errors import SubmitError, UsageError
from specsubmit.outside_text import visible

LOCAL_SOURCE = "your probe"


def _file_digest(name: str) -> str | None:
    path = Path(name).expanduser()
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def find_probe(target: str) -> CostProbe | None:
    """The newest saved probe of ``target``: a model name, a sha256 digest or a GGUF file."""
    from specsubmit.local import newest_probe_named

    digest = _file_digest(target)
    return newest_probe_named({target} | ({digest} if digest else set()))


def crowd_advice(server: str, probe: CostProbe, domain: str | None, own_probe: bool
                 ) -> dict[str, Any]:
    """The answer to print, computed here by the server's function from the inputs its
    answer carries (so a server's words are never printed as numbers, and a broken answer
    is said as such): with the crowd's cost units when it has some for this machine and
    ``own_probe`` does not ask otherwise, else with ``probe``; and with ``probe`` when it
    timed verification rounds and the crowd's units are prefills only (which read low)."""
    from specsubmit.send import check_on_contact, fetch_prediction

    fp = probe.fingerprint
    if probe.target.digest is None or fp.chip is None:
        raise UsageError("this probe names no target digest or no chip: run `specsubmit "
                         "probe` again with the model file")
    query = {"target": probe.target.digest, "chip": fp.chip, "engine": probe.engine.name}
    if fp.memory_gb is not None:
        query["memory_gb"] = str(fp.memory_gb)
    if domain is not None:
        query["domain"] = domain
    answer = fetch_prediction(server, query)
    check_on_contact(server, lambda line: print(line, file=sys.stderr))
    try:
        inputs = inputs_from_json(answer["inputs"])
        better = probe.measured == VERIFICATION and inputs.cost_measured != VERIFICATION
        if inputs.cost and not own_probe and not better:
            mine = forecast(inputs, inputs.cost, "crowd", domain, inputs.cost_measured)
        else:
            mine = forecast(inputs, (cost_unit(probe),), LOCAL_SOURCE, domain, probe.measured)
    except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError):
        raise SubmitError(f"{server} sent a prediction this client cannot read") from None
    mine["inputs"] = answer["inputs"]
    return mine


def _rows(answer: dict[str, Any]) -> list[tuple[float, list[str]]]:
    """Per candidate and kind of work, its best depth; best first."""
    out = []
    for entry in answer["candidates"]:
        label = visible(str(entry["candidate"]["label"]), 120)
        domain = domain_label(str(entry["domain"])) if entry["domain"] != ALL_DOMAINS \
            else "all"
        measured = "; ".join(f"{m['speedup']:.2f}x ({m['contributors']})"
                             for m in entry["measured"]) or "—"
        if not entry["predictions"]:
            out.append((-1.0, [label, domain, "—", "not predicted", "", measured]))
            continue
        best = max(entry["predictions"], key=lambda r: r["predicted"])
        out.append((best["predicted"], [label, domain, str(best["depth"]),
                                        f"{best['predicted']:.2f}x",
                                        f"{best['low']:.2f}-{best['high']:.2f}", measured]))
    return sorted(out, key=lambda r: -r[0])


def show_advice(answer: dict[str, Any], console: Console) -> None:
    cost = answer["cost"]
    source = ("this machine's cost: no probe of it" if cost is None else
              f"this machine's cost: {visible(str(cost['source']), 40)}"
              + (f" ({cost['contributors']} contributors)"
                 if cost["source"] != LOCAL_SOURCE else "")
              + (", timed as prefills, which read a round's cost low: predictions read "
                 "high" if cost.get("measured") == PREFILL else ""))
    machine = answer["machine"]
    table = Table(title=f"Predicted decode speedup on {visible(str(machine['chip']), 80)}",
                  caption=f"predicted from the crowd's acceptance per draft position and "
                          f"{source}; interval {LEVEL:.0%}, where a run of yours would "
                          "measure it (a run's own noise included); measured: on machines "
                          "like yours (contributors)")
    for column in ("Candidate", "Kind of work", "Depth", "Predicted", "Interval",
                   "Measured"):
        table.add_column(column, justify="left" if column in ("Candidate", "Kind of work")
                         else "right")
    for _, cells in _rows(answer):
        table.add_row(*cells)
    console.print(table)
    seen = set()
    for entry in answer["candidates"]:
        why = entry["why_not_predicted"]
        label = entry["candidate"]["label"]
        if why and (label, why) not in seen:
            seen.add((label, why))
            console.print(visible(f"{label}: not predicted: {why}", 400), highlight=False,
                          markup=False, soft_wrap=True)
        if entry.get("draft_cost") == "size" and (label, "size") not in seen:
            seen.add((label, "size"))
            console.print(visible(f"{label}: its draft was never probed on this chip: its "
                                  "time per token is this target's scaled by their file "
                                  "sizes, which leaves out a step's fixed cost (the "
                                  "prediction may read high)", 400),
                          highlight=False, markup=False, soft_wrap=True)
        miss = entry.get("model_error")
        if isinstance(miss, dict) and (label, "miss") not in seen:
            seen.add((label, "miss"))
            console.print(visible(
                f"{label}: its interval carries how far the model missed on "
                f"{int(miss['contributors'])} contributors' own machines (their runs "
                f"against their probes: {float(miss['log_sd']):.1%} typical)", 400),
                highlight=False, markup=False, soft_wrap=True)
    console.print(visible(str(answer["recommendation"]), 400), highlight=False, markup=False,
                  soft_wrap=True)


def advise_server_command(*, target: str, server: str, domain: str | None,
                          probe_file: Path | None, json_out: bool) -> None:
    from specsubmit.local import load_probe
    from specsubmit.run import report_console

    if domain is not None and domain not in DOMAINS:
        raise UsageError(f"--domain must be one of {', '.join(DOMAINS)}, got {domain!r}")
    probe = load_probe(probe_file.expanduser()) if probe_file is not None \
        else find_probe(target)
    if probe is None:
        raise UsageError(f"no probe of {target} on this machine: run `specsubmit probe "
                         f"--target {target}` first")
    answer = crowd_advice(server, probe, domain, own_probe=probe_file is not None)
    if json_out:
        sys.stdout.write(json.dumps(answer, indent=2) + "\n")
        return
    show_advice(answer, report_console())
