"""The engines as data (pure): one descriptor per engine a submission can name.

A descriptor says what an engine is called on every surface, which speculation mechanisms
it has and what each version of it can honour (and why, in words), where its acceptance
counters come from and how they are worded, and what its versions look like. The verdict
rule (``capability``), the evidence levels (``evidence``), the words of a result
(``conclusion``), the server's checks and pages and the client's labels all read these
entries, so that adding an engine is one entry here (plus its adapter in the client) and
no surface names the wrong engine or the wrong counter source.

Facts behind each entry: Ollama, ``shared/reference/ollama-api.md`` (no top-level
``draft_model`` field, unknown fields dropped silently; ``options.draft_num_predict`` from
v0.30.0, PR #16031, acting only on a model with MTP layers or a Modelfile DRAFT; the MLX
runner cannot switch speculation off per request). llama-server: ``real-engine.md``
(speculation is a launch flag; ``timings.draft_n`` / ``draft_n_accepted`` per request;
versions are build numbers). LM Studio: the lmstudio-ai/docs repository
(``1_developer/api-changelog.md``, 0.3.10: a top-level ``draft_model`` request field and a
response ``stats`` object with ``total_draft_tokens_count`` / ``accepted_draft_tokens_count``;
``1_developer/2_rest/endpoints.mdx``: the response's ``runtime.version``, the only version
its API reports, is the runtime's, not the app's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

__all__ = ["ENGINES", "EngineDescriptor", "MechanismRule", "descriptor", "engine_names",
           "parse_version"]


def parse_version(text: str) -> tuple[int, int, int] | None:
    """'0.33.1-rc2' -> (0, 33, 1); None when it is not a version at all."""
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    if not match:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


@dataclass(frozen=True)
class MechanismRule:
    """Whether a mechanism can act on this engine, and the phrase that says why.

    ``honoured``: True/False whatever the version; None: decided by ``since`` (a version
    below it cannot), or, without ``since``, not knowable from the version (the counters
    decide). The phrases may use ``{version}``.
    """

    honoured: bool | None
    why: str  # it can (or may) act
    why_not: str = ""  # it cannot (the version is too old, or the engine has no such thing)
    why_unknown: str = ""  # the version cannot tell
    since: tuple[int, int, int] | None = None


@dataclass(frozen=True)
class EngineDescriptor:
    """One engine as every surface names it (module docstring)."""

    name: str  # the wire's ``engine.name``
    label: str  # how a person reads it: "Ollama", "llama-server", "LM Studio"
    mechanisms: Mapping[str, MechanismRule]
    # counters_source -> where such counters come from, as a phrase after "counters from"
    counter_sources: Mapping[str, str]
    # The reason a config that could speculate shows no counters, and what to do about it.
    no_counters: str
    no_counters_todo: str
    # What to do when the version cannot tell whether a mechanism acts ("" : rerun with a
    # version that can be read).
    unknown_todo: str = ""
    # What to do when the baseline speculated ("": the Ollama-worded default advice).
    baseline_speculated_todo: str = ""
    # The option that names the engine's log, when its counters are read from one.
    log_option: str | None = None
    # Whether a llama.cpp build number ("b6123") is a readable version of this engine.
    build_number_versions: bool = False
    # Whether speculation cannot be switched off per request on the MLX runtime (Ollama's
    # MLX runner): every config speculates there, so nothing can be compared.
    mlx_always_speculates: bool = False
    # Whether the engine's own API reports counters for every request that drafted
    # (llama-server's timings.draft_n): then a config launched to speculate whose trials
    # show none did not speculate (capability.never_drafted), and is not_applied.
    counts_every_draft: bool = False
    extra: Mapping[str, str] = field(default_factory=dict)

    def rule(self, mechanism: str) -> MechanismRule:
        found = self.mechanisms.get(mechanism)
        if found is not None:
            return found
        if mechanism == "none":
            return MechanismRule(True, "no speculation requested")
        return MechanismRule(False, "", why_not=f"{self.label} has no {mechanism} mechanism")

    def can_honor(self, mechanism: str, version: str) -> bool | None:
        return _cached_can_honor(self.name, mechanism, version)

    def reason(self, mechanism: str, version: str) -> str:
        """Why a mechanism can or cannot work on this version, in one phrase."""
        rule = self.rule(mechanism)
        can = self.can_honor(mechanism, version)
        text = rule.why if can else rule.why_not if can is False else (
            rule.why_unknown or f"the {self.label} version {{version!r}} cannot be read")
        return text.replace("{version!r}", repr(version)).replace("{version}", version)

    def version_known(self, version: str) -> bool:
        if parse_version(version) is not None:
            return True
        return self.build_number_versions and bool(re.match(r"^b?\d+$", version.strip()))

    def counters_from(self, source: str | None) -> str:
        """``the llama-server lines of Ollama's server log``: where counters came from."""
        return self.counter_sources.get(source or "", f"{self.label} (as the client read it)")


@lru_cache(maxsize=4096)
def _cached_can_honor(name: str, mechanism: str, version: str) -> bool | None:
    rule = ENGINES[name].rule(mechanism)
    if rule.honoured is not None:
        return rule.honoured
    if rule.since is None:
        return None
    parsed = parse_version(version)
    return None if parsed is None else parsed >= rule.since


_OLLAMA = EngineDescriptor(
    name="ollama", label="Ollama",
    mechanisms={
        "draft_model_field": MechanismRule(
            False, "", why_not="Ollama has no top-level draft_model request field and drops "
                               "it silently"),
        "draft_num_predict": MechanismRule(
            None, "options.draft_num_predict is supported; it only acts on a model with MTP "
                  "layers or a DRAFT",
            why_not="options.draft_num_predict needs Ollama 0.30.0 or later (this is "
                    "{version})",
            why_unknown="the Ollama version {version!r} cannot be read", since=(0, 30, 0)),
        # Kept as it always read (True): no Ollama result uses it, old rows stay as stored.
        "server_launch": MechanismRule(True, "speculation requested through server_launch"),
    },
    counter_sources={"llama_server_log": "the llama-server lines of Ollama's server log",
                     "mlx_log": "the MLX runner lines of Ollama's server log"},
    no_counters="no counters were found in Ollama's server log",
    no_counters_todo="pass the Ollama server log with --ollama-log so counters can be read",
    unknown_todo="rerun with an Ollama that reports its version",
    log_option="--ollama-log", mlx_always_speculates=True,
)

_LLAMA_SERVER = EngineDescriptor(
    name="llama-server", label="llama-server",
    mechanisms={
        "server_launch": MechanismRule(
            True, "the client starts llama-server with the config's speculative flags"),
        "draft_model_field": MechanismRule(
            False, "", why_not="llama-server ignores per-request speculative fields"),
    },
    counter_sources={"engine_api": "llama-server's own API (timings.draft_n, "
                                   "draft_n_accepted)"},
    no_counters="llama-server's API reported no draft counters for these trials",
    no_counters_todo="check that the draft model loaded (the run's launch lines)",
    baseline_speculated_todo="check the baseline's launch line: it must have no --spec-type",
    unknown_todo="rerun with a llama-server build that reports its version (--version)",
    build_number_versions=True, counts_every_draft=True,
)

_LMSTUDIO = EngineDescriptor(
    name="lmstudio", label="LM Studio",
    mechanisms={
        # LM Studio documents draft_model from 0.3.10 but its API reports only the
        # runtime's version, never the app's: only the counters can tell.
        "draft_model_field": MechanismRule(
            None, "LM Studio takes a top-level draft_model request field",
            why_unknown="LM Studio documents the draft_model field from 0.3.10, but its API "
                        "does not report the app's version (runtime {version}), so only its "
                        "draft statistics can show whether it was honoured"),
    },
    counter_sources={"engine_api": "LM Studio's own API (stats.total_draft_tokens_count, "
                                   "accepted_draft_tokens_count)"},
    no_counters="LM Studio's responses carried no draft statistics",
    no_counters_todo="use LM Studio 0.3.10 or later and a draft model with the target's "
                     "vocabulary",
    unknown_todo="use LM Studio 0.3.10 or later: its draft statistics then show whether "
                 "the draft ran",
    baseline_speculated_todo="clear the draft model chosen for the target in LM Studio's "
                             "app (its Speculative Decoding setting), then run again",
)


ENGINES: Mapping[str, EngineDescriptor] = {
    e.name: e for e in (_OLLAMA, _LLAMA_SERVER, _LMSTUDIO)
}


def engine_names() -> tuple[str, ...]:
    return tuple(ENGINES)


def descriptor(name: str | None) -> EngineDescriptor:
    """The engine's descriptor; None (a v1 submission, an old row) is Ollama."""
    found = ENGINES.get(name or "ollama")
    if found is None:
        raise KeyError(f"unknown engine {name!r} (known: {', '.join(ENGINES)})")
    return found
