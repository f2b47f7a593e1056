"""The fake Ollama's models, option tables, greedy output and the small parsers its
handler and server share (server.py says what the fake reproduces)."""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

INT_OPTIONS = {"num_keep", "seed", "num_predict", "top_k", "repeat_last_n", "num_ctx",
               "num_batch", "num_gpu", "main_gpu", "num_thread"}
FLOAT_OPTIONS = {"min_p", "typical_p", "top_p", "temperature", "repeat_penalty",
                 "presence_penalty", "frequency_penalty"}
BOOL_OPTIONS = {"use_mmap"}
VOCAB = ["def", " merge", "_dicts", "(*", "dicts", ")", " ->", " dict", ":", "\n", "    ",
         "result", " =", " {}", " for", " d", " in", " result", ".update", "(d", ")\n",
         " return", " typing", " import", " Any", "[str", ",", " Any]", " #", " keys",
         " later", " wins", "```", "python", " values", " merged", " the", " a"]


def version_tuple(text: str) -> tuple[int, int, int]:
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match:
        return (0, 0, 0)
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def log_time() -> str:
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


def normalize(name: str) -> str:
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


@dataclass
class FakeModel:
    name: str
    size: int = 400_000_000
    family: str = "qwen3"
    parameter_size: str = "14.8B"
    quantization: str = "Q4_K_M"
    format: str = "gguf"
    mtp: bool = False
    tokens_per_s: float = 10_000.0
    prompt_tokens_per_s: float = 50_000.0
    load_s: float = 0.0
    natural_tokens: int = 400
    acceptance: float = 0.75
    context_length: int = 40960
    # Added to the accepted count its log lines claim: a log that says more tokens were
    # accepted than generated (a broken or shared log), which no rule may call confirmed.
    inflate_accepted: int = 0

    @property
    def digest(self) -> str:
        return hashlib.sha256(f"fake-model:{self.name}".encode()).hexdigest()

    def details(self) -> dict[str, Any]:
        return {"parent_model": "", "format": self.format, "family": self.family,
                "families": [self.family], "parameter_size": self.parameter_size,
               "quantization_level": self.quantization}


def default_models() -> list[FakeModel]:
    """The hardnumbers-m2 set: qwen3:14b and the two qwen2.5 drafts."""
    return [
        FakeModel("qwen3:14b"),
        FakeModel("qwen2.5:0.5b", size=397_821_319, family="qwen2", parameter_size="494.03M"),
        FakeModel("qwen2.5:1.5b", size=986_061_892, family="qwen2", parameter_size="1.5B"),
    ]


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Loaded:
    model: FakeModel
    expires_at: datetime | None
    num_ctx: int
    draft_num_predict: int | None = None


def parse_keep_alive(value: Any) -> timedelta | None:
    """None = forever; raises BadRequest on a bad duration string."""
    if value is None:
        return timedelta(minutes=5)
    if isinstance(value, bool):
        raise BadRequest(400, "json: cannot unmarshal bool into Go value of type string")
    if isinstance(value, int | float):
        return None if value < 0 else timedelta(seconds=value)
    if isinstance(value, str):
        total = 0.0
        parts = re.findall(r"(-?\d+(?:\.\d+)?)(ns|us|ms|s|m|h)", value)
        if not parts or "".join(a + b for a, b in parts) != value:
            raise BadRequest(400, f'time: invalid duration "{value}"')
        scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
        for number, unit in parts:
            total += float(number) * scale[unit]
        return None if total < 0 else timedelta(seconds=total)
    raise BadRequest(400, "json: cannot unmarshal keep_alive")


def greedy_tokens(model: FakeModel, prompt: str, options: dict[str, Any], count: int) -> list[str]:
    temperature = options.get("temperature", 0.8)
    seed = options.get("seed", -1)
    if temperature == 0:
        rng = random.Random(hashlib.sha256(f"{model.name}\0{prompt}".encode()).digest())
    elif isinstance(seed, int | float) and seed >= 0:
        rng = random.Random(f"{model.name}\0{prompt}\0{seed}")
    else:
        rng = random.Random()
    return [rng.choice(VOCAB) for _ in range(count)]
