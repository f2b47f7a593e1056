"""A real llama.cpp llama-server for the tests.

- ``build``: build llama-server once from the pinned llama-cpp-python sdist and cache it
  (stdlib only: CI calls ``python3 -m tests.support.realengine.build`` before any venv).
- ``tiny_gguf``: tiny seeded llama GGUF models: a target and drafts that agree with it
  always, often, never, or cannot be paired with it (needs ``gguf`` from the dev extra).
- ``ollama_store``: lay GGUF files out as an ``$OLLAMA_MODELS`` folder under protocol names.
- ``server``: start llama-server on a free loopback port, always end its process group.
- ``fixtures``: the session fixtures (skip without a toolchain, fail under CI=true).
- ``capture`` / ``fixture_files``: write / read tests/fixtures/llama_server/.
"""
