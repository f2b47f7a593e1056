"""Read the captured llama-server output in tests/fixtures/llama_server/.

Text fixtures start with ``#`` provenance lines ending in MARKER; ``verbatim(name)`` gives
what llama-server printed, ``provenance(name)`` the lines above it. JSON and the event
stream have no header (``verbatim`` returns them whole).
"""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "llama_server"
MARKER = "# --- verbatim below ---\n"


def path(name: str) -> Path:
    return FIXTURES / name


def _split(name: str) -> tuple[str, str]:
    text = path(name).read_text()
    if not text.startswith("#"):
        return "", text
    head, found, body = text.partition(MARKER)
    if not found:
        raise ValueError(f"{name}: '#' header without {MARKER.strip()!r}")
    return head, body


def verbatim(name: str) -> str:
    return _split(name)[1]


def provenance(name: str) -> list[str]:
    return _split(name)[0].splitlines()
