"""Which llama-server binary to run: the flag, else Ollama's bundled one, else PATH.

Ollama >= 0.30 ships upstream llama-server next to itself (``llm/llama_binary.go``):
``<install>/lib/ollama/llama-server`` on Linux (``<install>/bin/ollama`` is the CLI) and
``Ollama.app/Contents/Resources/llama-server`` on macOS. The install is found through
``which ollama`` with symlinks resolved (``/usr/local/bin/ollama`` is often a link into the
app bundle or the tarball's folder).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from specsubmit.errors import EngineNotFound

MACOS_APP = Path("/Applications/Ollama.app/Contents/Resources/llama-server")
BinarySource = Literal["flag", "ollama", "path"]


@dataclass(frozen=True)
class Binary:
    path: Path
    source: BinarySource

    @property
    def library_dir(self) -> Path | None:
        """Ollama's bundled binary loads its ggml libraries from its own folder."""
        return self.path.parent if self.source == "ollama" else None


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def ollama_bundled(which: Callable[[str], str | None] = shutil.which,
                   platform: str = sys.platform, macos_app: Path = MACOS_APP) -> Path | None:
    """Ollama's own llama-server, if an Ollama >= 0.30 is installed."""
    candidates: list[Path] = []
    found = which("ollama")
    if found:
        cli = Path(found).resolve()
        # Linux tarball / install.sh: <install>/bin/ollama and <install>/lib/ollama/.
        candidates.append(cli.parent.parent / "lib" / "ollama" / "llama-server")
        # macOS app bundle: Contents/Resources/ollama beside Contents/Resources/llama-server.
        candidates.append(cli.parent / "llama-server")
    if platform == "darwin":
        candidates.append(macos_app)
    return next((c for c in candidates if _executable(c)), None)


def find_binary(flag: Path | None, *, which: Callable[[str], str | None] = shutil.which,
                platform: str = sys.platform, macos_app: Path = MACOS_APP) -> Binary:
    """The binary to run, or EngineNotFound with what was tried."""
    if flag is not None:
        path = flag.expanduser()
        if not _executable(path):
            raise EngineNotFound(f"--llama-server {path} is not an executable file")
        return Binary(path.resolve(), "flag")
    bundled = ollama_bundled(which, platform, macos_app)
    if bundled is not None:
        return Binary(bundled, "ollama")
    on_path = which("llama-server")
    if on_path:
        return Binary(Path(on_path).resolve(), "path")
    raise EngineNotFound(
        "no llama-server found: pass --llama-server PATH, install Ollama 0.30 or later (it "
        "ships one), or put llama.cpp's llama-server on PATH"
    )
