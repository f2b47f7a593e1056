"""Run the fake Ollama by hand: `python -m tests.fakeollama [--version V] [--log FILE]`.

Serves the hardnumbers-m2 models plus `qwen3.5:9b-mtp` (MTP-capable) until Ctrl-C.
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

from tests.fakeollama.server import FakeModel, FakeOllama, default_models


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fakeollama")
    parser.add_argument("--version", default="0.33.1")
    parser.add_argument("--log", type=Path, default=None, help="server log file to append to")
    parser.add_argument("--tokens-per-s", type=float, default=50.0)
    args = parser.parse_args()
    models = default_models() + [FakeModel("qwen3.5:9b-mtp", mtp=True)]
    for model in models:
        model.tokens_per_s = args.tokens_per_s
    with FakeOllama(version=args.version, models=models, log_path=args.log) as fake:
        print(f"fake Ollama {args.version} at {fake.url} (OLLAMA_HOST=:{fake.port})", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
