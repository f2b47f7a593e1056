"""An LM Studio test server: a real HTTP server on a free loopback port, every field as the
lmstudio-ai/docs repository documents it (see server.py, which names the file of each).

    with FakeLMStudio() as lmstudio:
        httpx.get(f"{lmstudio.url}/api/v1/models")
"""

from tests.fakelmstudio.server import FakeLMModel, FakeLMStudio, default_lm_models

__all__ = ["FakeLMModel", "FakeLMStudio", "default_lm_models"]
