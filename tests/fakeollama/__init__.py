"""An Ollama-compatible test server: a real HTTP server on a free loopback port.

    with FakeOllama(version="0.33.1", models=[FakeModel("qwen3:14b")]) as ollama:
        httpx.get(f"{ollama.url}/api/version")

Faithful to shared/reference/ollama-api.md where a client can tell; see server.py.
"""

from tests.fakeollama.server import FakeModel, FakeOllama, default_models

__all__ = ["FakeModel", "FakeOllama", "default_models"]
