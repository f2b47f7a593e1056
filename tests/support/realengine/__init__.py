"""A real llama.cpp llama-server for the tests: build and cache it, write tiny GGUF models,
lay them out as an Ollama models folder, start and stop the server.

`build` needs only the standard library (CI calls it before the venv exists); `tiny_gguf`
needs the `gguf` package from the dev extra.
"""
