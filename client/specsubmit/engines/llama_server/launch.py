"""How a protocol's config becomes llama-server's command line and request body (pure):
its speculative type and knobs, the settings the protocol pins, and the ``Launch`` a
result records for each start.

A config's speculation is its command line (current builds ignore per-request
speculative fields): no ``--spec-type`` for the baseline; its ``spec_type`` option
otherwise, ``draft-simple`` when it names a draft model and no type (the protocols before
the option); the type's own knobs (``SPEC_FLAGS``) as the protocol sets them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specschema.protocol import Protocol, ProtocolConfig
from specschema.speculation import spec_type_of

if TYPE_CHECKING:
    from specschema import Launch

# Protocol option -> /completion field. min_p is pinned to 0 because that is Ollama's
# default and llama-server's is 0.05: the same protocol must mean the same sampling.
REQUEST_OPTIONS = {"num_predict": "n_predict", "temperature": "temperature", "seed": "seed",
                   "top_k": "top_k", "top_p": "top_p", "repeat_penalty": "repeat_penalty"}
FIXED_REQUEST = {"min_p": 0.0, "stream": True,
                 # The generated token ids, per chunk: outputs compare token by token.
                 "return_tokens": True,
                 # Every trial prefills its prompt again (no KV reuse between trials), so
                 # trials are alike and prompt_eval is measured each time.
                 "cache_prompt": False}
LAUNCH_OPTIONS = {"num_ctx": "--ctx-size", "spec_type": "--spec-type",
                  "spec_draft_n_max": "--spec-draft-n-max"}
# A speculating config's own knobs: option -> flag, given when the option is set. The
# n-gram drafters need no model; their depth is size-m (ngram-simple) or n-max (ngram-mod).
SPEC_FLAGS = {"spec_draft_n_max": "--spec-draft-n-max",
              "spec_ngram_simple_size_n": "--spec-ngram-simple-size-n",
              "spec_ngram_simple_size_m": "--spec-ngram-simple-size-m",
              "spec_ngram_mod_n_match": "--spec-ngram-mod-n-match",
              "spec_ngram_mod_n_min": "--spec-ngram-mod-n-min",
              "spec_ngram_mod_n_max": "--spec-ngram-mod-n-max"}
# Spec types that read a separate draft model, and the one that needs the target's own
# multi-token-prediction layers.
DRAFT_MODEL_TYPES = frozenset({"draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark"})
MTP_TYPE = "draft-mtp"
# Settings a protocol pins for every start (``Protocol.launch_options``): the flag, and
# whether it only means something when the start speculates (left off the baseline's).
PINNED_FLAGS = {"n_gpu_layers": ("--n-gpu-layers", False), "flash_attn": ("--flash-attn", False),
                "spec_draft_p_min": ("--spec-draft-p-min", True),
                "spec_draft_n_min": ("--spec-draft-n-min", True),
                "spec_draft_p_split": ("--spec-draft-p-split", True)}
KNOWN_OPTIONS = frozenset(REQUEST_OPTIONS) | set(LAUNCH_OPTIONS) | set(PINNED_FLAGS) \
    | set(SPEC_FLAGS)


def spec_type(protocol: Protocol, config: ProtocolConfig) -> str | None:
    """The config's --spec-type (module docstring; the rule is the schema's, which the
    server stores as the config's type); None: no speculation."""
    return spec_type_of(config.mechanism, protocol.request_options(config),
                        config.draft_model)


def pinned_flags(protocol: Protocol, config: ProtocolConfig) -> dict[str, str]:
    """The protocol's pinned settings for this config's start, flag (no dashes) -> value,
    as given on the command line and recorded in its ``Launch``."""
    options = protocol.request_options(config)
    found: dict[str, str] = {}
    speculates = spec_type(protocol, config) is not None
    for name, (flag, draft_only) in PINNED_FLAGS.items():
        if name in options and (speculates or not draft_only):
            value = options[name]
            found[flag.lstrip("-")] = (str(value).lower() if isinstance(value, bool)
                                       else str(value))
    return found


def spec_args(protocol: Protocol, config: ProtocolConfig, draft_path: str | None) -> list[str]:
    """The speculative part of the command line: the type, the draft file, the knobs."""
    kind = spec_type(protocol, config)
    if kind is None:
        return []
    args = ["--spec-type", kind]
    if draft_path is not None:
        args += ["--spec-draft-model", draft_path]
    options = protocol.request_options(config)
    knobs = {name: options[name] for name in SPEC_FLAGS if name in options}
    if kind in DRAFT_MODEL_TYPES:  # the depth every earlier protocol relied on
        knobs.setdefault("spec_draft_n_max", 3)
    for knob, setting in knobs.items():
        args += [SPEC_FLAGS[knob], str(setting)]
    return args


def launch_record(protocol: Protocol, config: ProtocolConfig, *, threads: int | None,
                  draft_digest: str | None) -> Launch:
    """The ``Launch`` a result records for one start of this config."""
    from specschema import Launch  # v2 wire model

    options = protocol.request_options(config)
    flags = pinned_flags(protocol, config)
    kind = spec_type(protocol, config)
    if kind is None:
        return Launch(source="engine_command", threads=threads, flags=flags)
    # The draftless types' knobs, as given (their depth among them).
    flags.update({SPEC_FLAGS[name].lstrip("-"): str(options[name]) for name in SPEC_FLAGS
                  if name in options and name != "spec_draft_n_max"})
    n_max = options.get("spec_draft_n_max", 3 if kind in DRAFT_MODEL_TYPES else None)
    return Launch(source="engine_command", threads=threads, spec_type=kind,
                  draft_n_max=n_max if isinstance(n_max, int) else None,
                  draft_model=draft_digest is not None, draft_model_digest=draft_digest,
                  flags=flags)


def request_body(protocol: Protocol, config: ProtocolConfig, prompt: str, *,
                 warmup: bool = False) -> dict[str, object]:
    """One /completion body: the prompt (in the target's template) and the generation
    options the protocol sets (a warm-up's: ``Protocol.request_options``), with the fixed
    fields."""
    options = protocol.request_options(config, warmup=warmup)
    body: dict[str, object] = {"prompt": prompt}
    body.update({REQUEST_OPTIONS[k]: v for k, v in options.items() if k in REQUEST_OPTIONS})
    body.update(FIXED_REQUEST)
    return body
