"""Real llama-server fixtures (see tests/support/realengine/fixtures.py for the skip policy)."""

from tests.support.realengine.fixtures import (  # noqa: F401 - pytest finds fixtures by name
    _ollama_store,
    gemma_first6,
    gemma_model,
    llama_server_bin,
    ollama_models_dir,
    ollama_stored_models,
    run_models_dir,
    tiny_model_set,
)
