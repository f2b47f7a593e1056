"""What llama-server's output says, in one line each (pure): its `--version` when it is not
llama-server, its error lines when it did not start, the lines that say it refused to
speculate, and what a GGUF header says about a model for the result."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from specschema import ModelInfo
from specsubmit.engines.llama_server.gguf_header import GgufHeader
from specsubmit.outside_text import visible

_ERROR_LINE = re.compile(r"\s(E)\s")
# What this build logs when it cannot speculate with the draft it was given: it then serves
# without speculation (the first two) or does not start at all (the last).
SPEC_REFUSED = ("vocabs are not compatible", "failed to initialize speculative decoding",
                "failed to load draft model")
# What this build logs, then exits, when --spec-type draft-mtp meets a target without MTP
# layers (the pre-flight refuses those whose header says so; this catches the others).
MTP_REFUSED = "failed to create MTP context"
# The warning lines before them that say which part of the rule failed (BOS, EOS, type).
SPEC_WHY = re.compile(r"draft model (?:vocab type|bos tokens|eos tokens|vocab) must")
_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
               10: "Q2_K", 12: "Q3_K_M", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
               17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}


def version_failure(path: Path, returncode: int, output: str) -> str:
    """One line: what `--version` should have said and the first line it did say (not a
    repr of the whole output with its \\n escapes; ``visible`` shows control characters)."""
    first = next((line.strip() for line in output.splitlines() if line.strip()), "")
    said = f"its first line: {visible(first, 120)}" if first else "it printed nothing"
    status = "" if returncode == 0 else f"exit {returncode}; "
    return (f"{path} is not a llama-server: `--version` printed no llama.cpp "
            f"\"version: ...\" line ({status}{said})")


def error_lines(lines: Sequence[str]) -> str:
    """The log's error lines, without llama.cpp's timestamp/level prefix, in one line."""
    found = [re.sub(r"^\s*[0-9.]+\s+E\s+", "", line).strip()
             for line in lines if _ERROR_LINE.search(line)]
    return "; ".join(found[:2])[:240] or (lines[-1].strip()[:240] if lines else "no output")


def logged_lines(lines: Sequence[str]) -> str:
    """Log lines without llama.cpp's timestamp, level and source prefix, in one line."""
    texts = [re.sub(r"^\s*[0-9.]+\s+[EWI]\s+(?:\S+\s+)?\S+:\s*", "", line).strip()
             for line in lines]
    return "; ".join(dict.fromkeys(t for t in texts if t))[:240]


def _parameter_size(count: int | None) -> str | None:
    if not count or count <= 0:
        return None
    return f"{count / 1e9:.1f}B" if count >= 1e9 else f"{count / 1e6:.0f}M"


def model_info(public: str, *, digest: str, size: int, header: GgufHeader) -> ModelInfo:
    """A model as a result names it: its public name, digest, size and header facts."""
    return ModelInfo(
        name=public[:120], digest=digest, size_bytes=size or None,
        family=(header.architecture or None) and header.architecture[:200],
        quantization=_FILE_TYPES.get(header.file_type, f"file_type {header.file_type}")
        if header.file_type is not None else None,
        parameter_size=_parameter_size(header.parameter_count),
        format="gguf",
    )
