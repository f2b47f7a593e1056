"""A config's speculative type and depth, from what it requests (pure).

The type is llama-server's ``--spec-type`` as a config launched by the client asks for it
(mechanism ``server_launch``): its ``spec_type`` option (``ngram-simple``, ``ngram-mod``,
``draft-mtp``, ``draft-simple``...), or ``draft-simple`` when it names a draft model and no
type (the llama-server protocols before the option). Other mechanisms name no type: what
Ollama's ``draft_num_predict`` drafts with is the target's (its MTP layers or its
Modelfile's DRAFT), and LM Studio's ``draft_model`` field does not say how it drafts.

The depth is the most tokens one round may draft, as the config's options set it: its
type's own knob (``DEPTH_OPTIONS``; ``spec_draft_n_max`` for the types that draft with a
model), or ``draft_num_predict`` for a config without a type (Ollama). None when the
options set none (the engine's own default then applies, which the request does not say)
or set 0 (no drafting: Ollama's baseline).

The client starts llama-server from the same type (specsubmit's
``engines/llama_server/launch.py``); the server stores both per config
(``summaries.spec_type``, ``summaries.depth``), the board's key columns.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["DEPTH_OPTIONS", "depth_of", "spec_type_of"]

# The mechanism whose type is llama-server's --spec-type (the client starts the engine).
LAUNCHED = "server_launch"
DRAFT_SIMPLE = "draft-simple"
# The option that caps the tokens one round drafts, per type: size-m for ngram-simple
# (the tokens it copies after a match), n-max for ngram-mod; any other type drafts up to
# spec_draft_n_max. Without a type: Ollama's draft_num_predict.
DEPTH_OPTIONS: Mapping[str | None, str] = {
    "ngram-simple": "spec_ngram_simple_size_m",
    "ngram-mod": "spec_ngram_mod_n_max",
    None: "draft_num_predict",
}
DRAFT_DEPTH_OPTION = "spec_draft_n_max"


def spec_type_of(mechanism: str, options: Mapping[str, object],
                 draft_model: str | None) -> str | None:
    """The config's speculative type (module docstring); None: it names none."""
    if mechanism != LAUNCHED:
        return None
    value = options.get("spec_type")
    if isinstance(value, str) and value and value != "none":
        return value
    return DRAFT_SIMPLE if draft_model is not None else None


def depth_of(spec_type: str | None, options: Mapping[str, object]) -> int | None:
    """The config's depth (module docstring): a positive whole number, or None."""
    value = options.get(DEPTH_OPTIONS.get(spec_type, DRAFT_DEPTH_OPTION))
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None
