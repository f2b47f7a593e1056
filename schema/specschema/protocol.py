"""Trial protocols as versioned data.

A protocol's identity is the sha256 of its canonical JSON form (sorted keys, no
whitespace). Results are only compared within one identity; a test pins each shipped
protocol's hash so that an edit without a version bump is caught. A file whose words were
mended after it was published (``published_sha256``) keeps the identity it was published
with; a test pins everything else in such a file, so that only its words can have moved.

Protocols that name no default target (``target: null``) take it as a run parameter,
which the submission records in ``protocol.parameters["target"]``. A config whose
``draft_model`` is ``$NAME`` takes its draft from the run parameter NAME (``--draft``):
``Protocol.for_run`` resolves it, and leaves out the configs whose parameter was not given;
client and server both plan a run from that (same schedule, same configs). A bracketed
protocol's run may make fewer rounds than the protocol (the run parameter ``rounds``, which
``specsubmit run --budget`` sets): every round ends where the next begins, so a run of fewer
rounds is the first part of the whole protocol's schedule, block for block. A protocol
with an early-stop rule (``early_stop``, ``specschema.earlystop``) leaves the configs the
rule stopped after the first round (the run parameter ``stopped``) out of the later rounds.

A protocol with a prompt set (``prompts``) rotates its trials through the prompts: trial
``i`` of every config answers prompt ``i % len(prompts)``, so a block of as many trials as
there are prompts covers every kind of work once (``specschema.domains``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from itertools import groupby
from operator import itemgetter
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
)

from specschema import schedule as order
from specschema.errors import ProtocolError
from specschema.models import Mechanism, OptionValue, Role
from specschema.strictjson import dumps_canonical


class _ProtocolModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GenerationOptions(_ProtocolModel):
    """Every generation option that changes timing or output, sent explicitly."""

    num_predict: Annotated[int, Field(ge=1, le=32768)]
    temperature: Annotated[float, Field(ge=0.0, le=2.0)]
    seed: int
    top_k: Annotated[int, Field(ge=0)]
    top_p: Annotated[float, Field(ge=0.0, le=1.0)]
    repeat_penalty: Annotated[float, Field(ge=0.0)]
    num_ctx: Annotated[int, Field(ge=256)]


class ProtocolConfig(_ProtocolModel):
    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9_.\-]{1,64}$")]
    role: Role
    model: str | None = Field(None, description="None: the protocol's target")
    draft_model: str | None = None
    mechanism: Mechanism
    extra_options: dict[str, OptionValue] = Field(
        default_factory=dict, description="added to the protocol's options, e.g. draft_num_predict"
    )
    request_fields: dict[str, OptionValue] = Field(
        default_factory=dict, description="extra top-level request fields, e.g. draft_model"
    )


class PromptItem(_ProtocolModel):
    """One prompt of a protocol's prompt set, labelled with its kind of work."""

    domain: Annotated[str, StringConstraints(pattern=r"^[a-z_]{1,32}$")]
    text: Annotated[str, StringConstraints(min_length=1, max_length=20_000)]


class EarlyStop(_ProtocolModel):
    """A rule fixed in advance by which a draft config stops after the first round
    (``specschema.earlystop`` says why it is safe): "none_accepted", none of at least
    ``min_drafted`` drafted tokens accepted."""

    rule: Literal["none_accepted"]
    min_drafted: Annotated[int, Field(ge=1)]


class Requirements(_ProtocolModel):
    min_engine_version: dict[str, str] = Field(default_factory=dict)
    memory_bytes: int | None = None
    target_note: str | None = None


# Fields added after the first protocols were pinned, with the value that leaves a
# protocol's identity as it was (``Protocol.sha256`` leaves them out at that value).
_ADDED_FIELDS: dict[str, object] = {"block_trials": None, "warmup_each_block": False,
                                     "headline": "decode", "launch_options": {},
                                     "interval": "block_bootstrap", "prompts": None,
                                     "engine": None, "warmup_tokens": None,
                                     "early_stop": None, "published_sha256": None}
# The engine each protocol pinned before protocols named theirs (``Protocol.engine``).
_ENGINES_BEFORE: dict[str, str] = {
    "hardnumbers-m2": "ollama", "ollama-draft": "ollama", "llamacpp-draft": "llama-server",
    "llamacpp-draft-long": "llama-server", "lmstudio-draft": "lmstudio"}
# Launch options a protocol may pin for every config (llama-server flags; the engine maps
# each to its flag and records it as launched). Keys beyond these are refused.
LAUNCH_OPTION_NAMES = frozenset({"spec_draft_p_min", "spec_draft_n_min", "spec_draft_p_split",
                                 "n_gpu_layers", "flash_attn"})


class Protocol(_ProtocolModel):
    id: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9\-]{0,63}$")]
    version: Annotated[int, Field(ge=1)]
    description: str
    target: str | None
    configs: Annotated[list[ProtocolConfig], Field(min_length=2)]
    prompt: str
    options: GenerationOptions
    stream: bool
    keep_alive: str
    warmups_per_config: Annotated[int, Field(ge=0, le=10)]
    trials_per_config: Annotated[int, Field(ge=1, le=100)]
    order: Literal["blocked", "interleaved", "abba", "bracketed"]
    requirements: Requirements
    # "abba": blocks of ``block_trials`` trials, configs in order then reversed (A B C C B
    # A ...), so that every config's mean run position is the same and a linear drift
    # cancels while the engine switches configs only once per block.
    block_trials: Annotated[int, Field(ge=1, le=100)] | None = None
    # The warm-ups run again whenever the config changes (each block after a switch),
    # not once per config before all trials: a switch of a load-time option reloads.
    warmup_each_block: bool = False
    # A warm-up's token limit, when shorter than a trial's (None: a whole trial). A warm-up
    # after a start pages the weights in and runs the graph once; a few tokens do that, and
    # a full one made a third of a run with an engine start per block.
    warmup_tokens: Annotated[int, Field(ge=1, le=4096)] | None = None
    # "bracketed": blocks of ``block_trials`` trials in rounds of baseline, drafts, baseline,
    # drafts reversed, closed by one more baseline block (B D1 D2 B D2 D1 B). Every draft
    # block sits between two baseline blocks, each config's mean run position is the same
    # (a linear drift cancels), and the baseline's repeated blocks show how much the machine
    # changed. Drafts run ``trials_per_config`` trials; the baseline one block more.
    # Which speedup leads the result: "decode" (decode tok/s) or "wall" (wall time per
    # request, prompt included: the long-context protocols, where the draft's own prefill is
    # part of the price). Both are always computed and shown.
    headline: Literal["decode", "wall"] = "decode"
    # Settings pinned for every config's engine start (``LAUNCH_OPTION_NAMES``): a build's
    # defaults move (llama.cpp's --spec-draft-p-min was 0.75-0.9, is 0.00 now), so a protocol
    # that relies on them says them. Part of every config's request options on the wire.
    launch_options: dict[str, OptionValue] = Field(default_factory=dict)
    # How a result with blocks gets its speedup and 95 % interval (``specschema.stats``):
    # "block_bootstrap", the median of block ratios with a two-stage seeded bootstrap (the
    # first bracketed protocols; too narrow with two blocks per draft), or "block_t", the
    # geometric mean of block ratios with Student's t on the blocks (needs two blocks per
    # config or more). Results without blocks use the ratio of medians over trials.
    interval: Literal["block_bootstrap", "block_t"] = "block_bootstrap"
    # The prompt set (module docstring); None: every trial answers ``prompt``.
    prompts: Annotated[list[PromptItem], Field(min_length=1, max_length=16)] | None = None
    # The engine it is run on (a ``specschema.engines`` name); None in the files before the
    # field (``engine_name`` knows theirs).
    engine: str | None = None
    # The early-stop rule (bracketed protocols only); None: every config runs every round.
    early_stop: EarlyStop | None = None
    # The identity this file was published with, when its description was mended after
    # (a wording that pointed readers at the project's tracker): results made with it name
    # that hash. None: the identity is the file's own hash.
    published_sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] | None = None
    # The configs a run stopped by that rule (the run parameter ``stopped``, ``for_run``).
    _stopped: tuple[str, ...] = PrivateAttr(())
    # A protocol specialised by ``for_run`` keeps the identity of the one it came from.
    _shipped_sha256: str | None = PrivateAttr(None)

    @property
    def sha256(self) -> str:
        if self._shipped_sha256 is not None:
            return self._shipped_sha256
        if self.published_sha256 is not None:
            return self.published_sha256
        return hashlib.sha256(dumps_canonical(self.identity_data())).hexdigest()

    def identity_data(self) -> dict[str, object]:
        """What the identity hashes (canonically): every field, those added later left out
        at their defaults (absent from the files that predate them)."""
        data: dict[str, object] = self.model_dump(mode="json")
        for name, default in _ADDED_FIELDS.items():
            if data.get(name) == default:
                del data[name]
        return data

    def baseline(self) -> ProtocolConfig:
        return next(c for c in self.configs if c.role == "baseline")

    @property
    def engine_name(self) -> str | None:
        """The engine this protocol is run on (None: not known)."""
        return self.engine or _ENGINES_BEFORE.get(self.id)

    # --- the prompt set -------------------------------------------------------------------

    def prompt_for(self, index: int) -> str:
        """The prompt trial ``index`` of a config answers (warm-ups: index 0)."""
        if not self.prompts:
            return self.prompt
        return self.prompts[index % len(self.prompts)].text

    def domain_of(self, index: int) -> str | None:
        """The kind of work of trial ``index``; None without a prompt set."""
        if not self.prompts:
            return None
        return self.prompts[index % len(self.prompts)].domain

    @property
    def domains(self) -> tuple[str, ...]:
        """The prompt set's domains in their order, each once; () without one."""
        return tuple(dict.fromkeys(p.domain for p in self.prompts or ()))

    # --- run parameters -------------------------------------------------------------------

    @property
    def draft_parameters(self) -> tuple[str, ...]:
        """The run parameters the configs take their drafts from (``$NAME``), in order."""
        return tuple(dict.fromkeys(c.draft_model[1:] for c in self.configs
                                   if c.draft_model and c.draft_model.startswith("$")))

    @property
    def rounds(self) -> int | None:
        """The bracketed rounds it runs (baseline, drafts, baseline, drafts reversed; the
        closing baseline block apart); None for another order."""
        if self.order != "bracketed":
            return None
        return self.trials_per_config // (2 * (self.block_trials or 1))

    @property
    def stopped(self) -> tuple[str, ...]:
        """The draft configs this run stopped after its first round (``early_stop``)."""
        return self._stopped

    def for_run(self, parameters: Mapping[str, str]) -> Protocol:
        """This protocol as one run makes it: each ``$NAME`` draft replaced by the
        parameter's value, the configs whose parameter is absent left out, when the
        ``configs`` parameter names some (comma-separated), only those besides the baseline,
        and with the ``rounds`` parameter (a bracketed protocol only: a whole number from 1
        to its own rounds, written plainly) that many rounds, and with ``stopped`` (draft
        configs of the run, comma-separated in its config order) those configs left out of
        every round after the first. Keeps this protocol's identity (``sha256``); the
        protocol itself when nothing changes. Raises ProtocolError for a chosen config it
        does not have, for rounds it cannot make and for configs it cannot stop."""
        chosen = parameters.get("configs")
        rounds = parameters.get("rounds")
        stopped = parameters.get("stopped")
        if not self.draft_parameters and chosen is None and rounds is None and stopped is None:
            return self
        keep = None if chosen is None else set(chosen.split(","))
        unknown = sorted((keep or set()) - {c.name for c in self.configs})
        if unknown:
            raise ProtocolError(f"protocol {self.id} has no config {unknown[0]!r} (its "
                                f"configs: {', '.join(c.name for c in self.configs)})")
        configs: list[ProtocolConfig] = []
        for config in self.configs:
            if keep is not None and config.role != "baseline" and config.name not in keep:
                continue
            draft = config.draft_model
            if draft is not None and draft.startswith("$"):
                value = parameters.get(draft[1:])
                if value is None:
                    continue
                config = config.model_copy(update={"draft_model": value})
            configs.append(config)
        update: dict[str, object] = {"configs": configs}
        if rounds is not None:
            update["trials_per_config"] = self._trials_in(rounds)
        run = self.model_copy(update=update)
        run._shipped_sha256 = self.sha256
        if stopped is not None:  # specschema.earlystop: a rule, and a round after the first
            drafts = [c.name for c in configs if c.role == "draft"]
            run._stopped = order.named_drafts(stopped, drafts) or ()
            if self.early_stop is None or (run.rounds or 0) < 2 or not run._stopped:
                raise ProtocolError(f"protocol {self.id} cannot stop {stopped!r} early: only "
                                    "its drafts, once each in its order, in a run of two "
                                    "rounds or more, when it has an early-stop rule")
        return run

    def _trials_in(self, rounds: str) -> int:
        """``trials_per_config`` for the run parameter ``rounds`` (``for_run``)."""
        most = self.rounds
        if most is None:
            raise ProtocolError(f"protocol {self.id} does not run in bracketed rounds: it "
                                "takes no rounds")
        if not (rounds.isascii() and rounds.isdigit() and rounds == str(int(rounds))
                and 1 <= int(rounds) <= most):
            raise ProtocolError(f"protocol {self.id} runs 1 to {most} rounds, not {rounds!r}")
        return int(rounds) * 2 * (self.block_trials or 1)

    def config(self, name: str) -> ProtocolConfig:
        for candidate in self.configs:
            if candidate.name == name:
                return candidate
        raise ProtocolError(f"protocol {self.id} has no config {name!r}")

    def model_for(self, config: ProtocolConfig, target: str | None) -> str:
        model = config.model or target or self.target
        if model is None:
            raise ProtocolError(f"protocol {self.id} needs a target model (--target)")
        return model

    def request_options(self, config: ProtocolConfig, *, warmup: bool = False
                        ) -> dict[str, OptionValue]:
        """The exact `options` object a trial sends for this config; ``warmup``: a
        warm-up's, whose token limit is ``warmup_tokens`` when the protocol sets one."""
        options: dict[str, OptionValue] = dict(self.options.model_dump())
        options.update(self.launch_options)
        options.update(config.extra_options)
        if warmup and self.warmup_tokens is not None:
            options["num_predict"] = self.warmup_tokens
        return options

    def schedule(self) -> list[tuple[str, int]]:
        """The run order as (config name, trial index) pairs (``specschema.schedule``)."""
        names = [c.name for c in self.configs]
        trials, size = self.trials_per_config, self.block_trials or 1
        if self.order == "blocked":
            return order.blocked(names, trials)
        if self.order == "abba":
            return order.abba(names, trials, size)
        if self.order == "bracketed":
            drafts = [c.name for c in self.configs if c.role == "draft"]
            return order.bracketed(self.baseline().name, drafts, trials, size, self._stopped)
        return order.interleaved(names, trials)

    def blocks(self) -> list[int]:
        """The block number of each ``schedule()`` entry: a block is a run of consecutive
        trials of one config, numbered from 0 in run order."""
        out: list[int] = []
        previous: str | None = None
        for name, _ in self.schedule():
            if previous is not None and name != previous:
                out.append(out[-1] + 1)
            else:
                out.append(out[-1] if out else 0)
            previous = name
        return out

    def trials_for(self, name: str) -> int:
        """How many trials config ``name`` runs (the baseline of "bracketed" runs more)."""
        return sum(1 for key, _ in self.schedule() if key == name)

    def warmups_for(self, name: str) -> int:
        """How many warm-ups config ``name`` runs: once per config, or (``warmup_each_block``)
        once per run of consecutive trials of it in the schedule."""
        if not self.warmup_each_block:
            return self.warmups_per_config
        runs = sum(1 for key, _ in groupby(self.schedule(), key=itemgetter(0)) if key == name)
        return self.warmups_per_config * runs
