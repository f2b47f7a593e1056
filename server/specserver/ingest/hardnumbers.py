"""Import a published Hard Numbers results file as a reference submission (pure).

The file (``spec-decode-m2/results/spec_decode.json`` in Pitambarmahato/hardnumbers-experiments)
has the keys experiment, description, target, drafts, prompt_chars, num_predict, trials and
results. ``target`` and ``drafts`` are model names as the article printed them, with the size
and quantization in brackets: ``"qwen3:14b (Q4_K_M, 9.3 GB)"``, ``"qwen2.5:0.5b (397 MB)"``,
``"qwen2.5:1.5b (~1 GB)"``. The name is what is compared with the protocol; the bracket goes
to the model's ``quantization`` and ``size_bytes`` (decimal units, as Ollama prints them; the
published figures are rounded, so is the size) and, verbatim, into the note. ``results`` is
one object per trial with config, trial, wall_s, total_duration_s, load_duration_s,
prompt_eval_count, prompt_eval_duration_s, eval_count, eval_duration_s and tok_per_s.
Configs are ``no_draft``, ``draft_qwen2.5_0.5b`` and ``draft_qwen2.5_1.5b``: exactly the
configs of protocol ``hardnumbers-m2``.

The result is a ``Submission`` of that protocol, unsigned (no key id), marked imported with
its source. Its drafts are ``not_applied``: Ollama has no top-level draft_model field.
Durations in seconds become integer nanoseconds (``round(s * 1e9)``), which round-trips
every value with at most nine decimals exactly, so the stored summary reproduces the file's
own medians (wall, eval and tok/s). What the file does not record is not invented: time to
first token, done_reason and warmups are absent; the output text was not published, so
output_chars is 0 and output_sha256 the hash of the empty string (the page says so).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Connection

from specschema.capability import engine_can_honor, verdict
from specschema.models import (
    ClientInfo,
    ConfigResult,
    Engine,
    Fingerprint,
    ModelInfo,
    OsInfo,
    ProtocolRef,
    SpeculationEvidence,
    Submission,
    Trial,
)
from specschema.protocol import Protocol
from specschema.protocol_files import get_protocol
from specschema.summary import ConfigSummary, summarize
from specserver import __version__
from specserver.errors import Invalid
from specserver.ingest.checks import Checked
from specserver.ingest.rows import submission_rows
from specserver.store import OS_NAMES, RowSet, moderation, tables

PROTOCOL_ID = "hardnumbers-m2"
MODEL_LABEL = re.compile(r"^\s*([^\s()]+)\s*(?:\(([^()]*)\))?\s*$")
QUANTIZATION = re.compile(r"^(?:I?Q\d\w*|F16|F32|BF16|MXFP4)$", re.IGNORECASE)
SIZE = re.compile(r"^(~|about\s+)?(\d+(?:\.\d+)?)\s*(KB|MB|GB|TB)$", re.IGNORECASE)
SIZE_UNITS = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
TOKS_TOLERANCE = 0.005  # tok_per_s vs eval_count / eval_duration_s (the file rounds)
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
TRIAL_KEYS = ("config", "trial", "wall_s", "total_duration_s", "load_duration_s",
              "prompt_eval_count", "prompt_eval_duration_s", "eval_count", "eval_duration_s",
              "tok_per_s")


class ImportRejected(Invalid):
    code = "import_rejected"


@dataclass(frozen=True)
class Imported:
    submission: Submission
    summaries: list[ConfigSummary]
    source: str
    body: bytes

    @property
    def submission_id(self) -> str:
        return str(self.submission.submission_id)


def _ns(seconds: Any, where: str) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(
            seconds) or seconds < 0:
        raise ImportRejected(f"{where}: expected a non-negative number of seconds")
    return round(seconds * 1e9)


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ImportRejected(f"{where}: expected a non-negative integer")
    return value


def _load(content: bytes) -> dict[str, Any]:
    try:
        data = json.loads(content)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ImportRejected(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ImportRejected("the file must hold a JSON object")
    missing = [k for k in ("experiment", "target", "num_predict", "trials", "results")
               if k not in data]
    if missing:
        raise ImportRejected(f"missing keys: {', '.join(missing)}")
    if not isinstance(data["results"], list) or not data["results"]:
        raise ImportRejected("results must be a non-empty list")
    return data


@dataclass(frozen=True)
class ModelLabel:
    """One model as the file names it: ``qwen3:14b (Q4_K_M, 9.3 GB)``."""

    text: str
    name: str
    quantization: str | None = None
    size_bytes: int | None = None

    def info(self) -> ModelInfo:
        return ModelInfo(name=self.name, quantization=self.quantization,
                         size_bytes=self.size_bytes)


def parse_model_label(text: Any, where: str) -> ModelLabel:
    """Split ``name (quantization, size)``; a bracket part that is neither is refused."""
    match = MODEL_LABEL.match(text) if isinstance(text, str) else None
    if match is None:
        raise ImportRejected(f"{where}: expected a model name such as 'qwen3:14b (Q4_K_M, "
                             f"9.3 GB)', got {str(text)[:80]!r}")
    name, bracket = match.groups()
    quantization: str | None = None
    size: int | None = None
    for part in (p.strip() for p in (bracket or "").split(",") if p.strip()):
        sized = SIZE.match(part)
        if QUANTIZATION.match(part) and quantization is None:
            quantization = part
        elif sized and size is None:
            size = round(float(sized.group(2)) * SIZE_UNITS[sized.group(3).upper()])
        else:
            raise ImportRejected(f"{where}: {part!r} in {text!r} is neither a quantization "
                                 "nor a size")
    return ModelLabel(text=text.strip(), name=name, quantization=quantization,
                      size_bytes=size or None)


def _check_header(data: dict[str, Any], protocol: Protocol) -> list[ModelLabel]:
    """The header's checks; returns the target and the drafts, in the protocol's order."""
    target = parse_model_label(data["target"], "target")
    if target.name != protocol.target:
        raise ImportRejected(f"target {target.name!r} is not the protocol's {protocol.target!r}")
    wanted = [c.draft_model for c in protocol.configs if c.draft_model]
    drafts = data.get("drafts", None)
    if drafts is None:  # older files may not list them: the protocol's names, bare
        labels = [ModelLabel(text=name, name=name) for name in wanted]
    elif not isinstance(drafts, list):
        raise ImportRejected("drafts must be a list of model names")
    else:
        labels = [parse_model_label(d, f"drafts[{i}]") for i, d in enumerate(drafts)]
        if sorted(label.name for label in labels) != sorted(wanted):
            raise ImportRejected(f"drafts {[label.name for label in labels]} are not the "
                                 f"protocol's {wanted}")
        labels.sort(key=lambda label: wanted.index(label.name))
    if data["num_predict"] != protocol.options.num_predict:
        raise ImportRejected(f"num_predict {data['num_predict']} is not the protocol's "
                             f"{protocol.options.num_predict}")
    if data["trials"] != protocol.trials_per_config:
        raise ImportRejected(f"trials {data['trials']} is not the protocol's "
                             f"{protocol.trials_per_config}")
    return [target, *labels]


def _trial(entry: Any, protocol: Protocol, positions: dict[tuple[str, int], int],
           first_trial: int, where: str) -> tuple[str, Trial]:
    if not isinstance(entry, dict):
        raise ImportRejected(f"{where}: expected an object")
    missing = [k for k in TRIAL_KEYS if k not in entry]
    if missing:
        raise ImportRejected(f"{where}: missing {', '.join(missing)}")
    config = entry["config"]
    if config not in {c.name for c in protocol.configs}:
        raise ImportRejected(f"{where}: unknown config {config!r}")
    index = _int(entry["trial"], f"{where}.trial") - first_trial
    if (config, index) not in positions:
        raise ImportRejected(f"{where}: trial {entry['trial']} is out of range")
    eval_count = _int(entry["eval_count"], f"{where}.eval_count")
    eval_ns = _ns(entry["eval_duration_s"], f"{where}.eval_duration_s")
    if eval_ns <= 0:
        raise ImportRejected(f"{where}: eval_duration_s must be positive")
    rate = entry["tok_per_s"]
    computed = eval_count / eval_ns * 1e9
    if not isinstance(rate, int | float) or abs(rate - computed) > TOKS_TOLERANCE * computed + 0.01:
        raise ImportRejected(f"{where}: tok_per_s {rate} disagrees with eval_count / "
                             f"eval_duration_s = {computed:.4f}")
    trial = Trial(
        index=index, position=positions[(config, index)],
        wall_s=float(entry["wall_s"]) if isinstance(entry["wall_s"], int | float) else -1.0,
        ttft_s=None,
        total_duration_ns=_ns(entry["total_duration_s"], f"{where}.total_duration_s"),
        load_duration_ns=_ns(entry["load_duration_s"], f"{where}.load_duration_s"),
        prompt_eval_count=_int(entry["prompt_eval_count"], f"{where}.prompt_eval_count"),
        prompt_eval_duration_ns=_ns(entry["prompt_eval_duration_s"],
                                    f"{where}.prompt_eval_duration_s"),
        eval_count=eval_count, eval_duration_ns=eval_ns, done_reason=None,
        output_chars=0, output_sha256=EMPTY_SHA256, cold=False,
    )
    return config, trial


def build_submission(content: bytes, *, chip: str, memory_gb: int, ollama_version: str,
                     os_name: str | None, source: str, now: datetime | None = None) -> Imported:
    """Parse and check a Hard Numbers results file; raise ImportRejected naming the problem."""
    protocol = get_protocol(PROTOCOL_ID)
    data = _load(content)
    labels = _check_header(data, protocol)
    if os_name is not None and os_name not in OS_NAMES:
        raise ImportRejected(f"--os must be one of {', '.join(OS_NAMES)}")
    positions = {slot: i for i, slot in enumerate(protocol.schedule())}
    numbers = [e.get("trial") for e in data["results"] if isinstance(e, dict)]
    first_trial = 0 if 0 in numbers else 1
    trials: dict[str, list[Trial]] = {c.name: [] for c in protocol.configs}
    for i, entry in enumerate(data["results"]):
        name, trial = _trial(entry, protocol, positions, first_trial, f"results[{i}]")
        if any(t.index == trial.index for t in trials[name]):
            raise ImportRejected(f"results[{i}]: trial {entry['trial']} of {name} repeats")
        trials[name].append(trial)
    short = [n for n, ts in trials.items() if len(ts) != protocol.trials_per_config]
    if short:
        raise ImportRejected(f"configs without {protocol.trials_per_config} trials: "
                             f"{', '.join(short)}")
    target = protocol.model_for(protocol.baseline(), None)
    configs = []
    for config in protocol.configs:
        requested = config.role == "draft"
        can_honor = engine_can_honor(config.mechanism, ollama_version)
        configs.append(ConfigResult(
            name=config.name, role=config.role, model=target, draft_model=config.draft_model,
            request_options=protocol.request_options(config),
            request_fields=dict(config.request_fields),
            trials=sorted(trials[config.name], key=lambda t: t.index),
            speculation=SpeculationEvidence(
                requested=requested, mechanism=config.mechanism, engine_can_honor=can_honor,
                observed=verdict(requested=requested, can_honor=can_honor, counters_seen=False),
            ),
        ))
    digest = hashlib.sha256(content).hexdigest()
    published = ", ".join(label.text for label in labels)
    try:
        submission = Submission(
            schema_version=1,
            # (the name before specatlas: an import's id never changes)
            submission_id=uuid.uuid5(uuid.NAMESPACE_URL, f"specbench:hardnumbers:{digest}"),
            created_at=now or datetime.now(UTC),
            client=ClientInfo(name="specserver-import", version=__version__),
            fingerprint=Fingerprint(chip=chip, memory_gb=memory_gb, os=OsInfo(name=os_name)),  # type: ignore[arg-type]
            engine=Engine(version=ollama_version),
            models=[label.info() for label in labels],
            protocol=ProtocolRef(id=protocol.id, version=protocol.version,
                                 sha256=protocol.sha256),
            configs=configs,
            complete=True,
            note=(f"Imported reference result: {str(data['experiment'])[:100]}; models as "
                  f"published: {published[:200]} ({source[:150]})"),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in first["loc"])
        raise ImportRejected(f"the file does not make a valid submission: {path}: "
                             f"{first['msg']}") from None
    if any(t.wall_s < 0 for c in submission.configs for t in c.trials):
        raise ImportRejected("wall_s must be a non-negative number")
    return Imported(submission, summarize(submission), source, content)


def import_rows(imported: Imported, received_at: datetime) -> RowSet:
    """The store's rows for an import: ingestion's rows, unsigned and marked imported."""
    checked = Checked(
        submission=imported.submission, submission_id=imported.submission_id, key_id="",
        body=imported.body, body_sha256=hashlib.sha256(imported.body).hexdigest(),
        summaries=imported.summaries,
    )
    rows = submission_rows(checked, received_at)
    names = [c.name for c in tables.submissions.columns]
    fixed = []
    for row in rows.rows["submissions"]:
        values = dict(zip(names, row, strict=True))
        values.update(key_id=None, source="imported",
                      source_note=f"{imported.source} (outputs not published: output_chars 0)")
        fixed.append(tuple(values[n] for n in names))
    rows.rows["submissions"] = fixed
    return rows


def import_into(conn: Connection, imported: Imported, actor: str) -> dict[str, Any]:
    """Store an import on an open write connection (the admin API's and the CLI's one
    step); the receipt the CLI prints."""
    rows = import_rows(imported, datetime.now(UTC))
    moderation.store_import(conn, rows, imported.submission_id, imported.source, actor)
    return {
        "submission_id": imported.submission_id,
        "summary": [s.model_dump() for s in imported.summaries],
    }
