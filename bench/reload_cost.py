"""What a draft_num_predict switch costs, ollama-draft v1 (interleaved) against v2 (ABBA
blocks with a warm-up after each switch), on the fake Ollama.

draft_num_predict is a load-time option: every change restarts llama-server. The fake
sleeps ``--load-s`` per start (a real 9B model takes seconds), so the figures show where
the reloads land: inside the trials' timings (v1) or in the warm-ups (v2), and what the
whole run costs in wall time.

    .venv/bin/python bench/reload_cost.py [--load-s 0.2] [--tokens-per-s 1500]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakeollama import FakeModel, FakeOllama  # noqa: E402

from specschema import Fingerprint, find_protocol, get_protocol  # noqa: E402
from specsubmit.engines.ollama.client import OllamaClient  # noqa: E402
from specsubmit.engines.ollama.engine import OllamaEngine, OllamaLog  # noqa: E402
from specsubmit.run.runner import RunSettings, run_protocol  # noqa: E402

V1_SHA = "722ee9e1c54c00d296d7ab1c130438e1b432952326e8b15e4a1e89c463c27924"
TARGET = "qwen3.5:9b-mtp"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--load-s", type=float, default=0.2)
    parser.add_argument("--tokens-per-s", type=float, default=1500.0)
    args = parser.parse_args()
    machine = Fingerprint(memory_bytes=24 * 1024**3, memory_gb=24, unified_memory=True)
    print(f"fake Ollama 0.34.1, MTP target, {args.load_s:.2f} s per engine start")
    print(f"{'protocol':<16}{'requests':>9}{'starts':>8}{'cold trials':>13}"
          f"{'load in trials s':>18}{'load in warm-ups s':>20}{'run wall s':>12}")
    for protocol in (find_protocol("ollama-draft", 1, V1_SHA), get_protocol("ollama-draft")):
        assert protocol is not None
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "server.log"
            model = FakeModel(TARGET, mtp=True, load_s=args.load_s,
                              tokens_per_s=args.tokens_per_s)
            with FakeOllama(version="0.34.1", models=[model], log_path=log) as fake:
                settings = RunSettings(protocol=protocol, target=TARGET)
                started = time.perf_counter()
                with OllamaClient(fake.url, timeout_s=60) as client:
                    engine = OllamaEngine(client, settings, OllamaLog(path=log))
                    sub = run_protocol(engine, settings, fingerprint=machine).submission
                wall = time.perf_counter() - started
            starts = log.read_text().count('msg="starting llama-server"')
        trials = [t for c in sub.configs for t in c.trials]
        warmups = [w for c in sub.configs for w in c.warmups]
        print(f"{'ollama-draft v' + str(protocol.version):<16}{len(trials) + len(warmups):>9}"
              f"{starts:>8}{sum(t.cold for t in trials):>8} / {len(trials):<3}"
              f"{sum(t.load_duration_ns for t in trials) / 1e9:>18.2f}"
              f"{sum(w.load_duration_ns or 0 for w in warmups) / 1e9:>20.2f}{wall:>12.2f}")


if __name__ == "__main__":
    main()
