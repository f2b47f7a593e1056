"""Capture real llama-server output into tests/fixtures/llama_server/ (re-run to refresh).

    .venv/bin/python -m tests.support.realengine.capture [--out DIR] [--workdir DIR]

Runs the standard scenario (server.PROMPT, N_PREDICT, DRAFT_N_MAX) on the tiny model set,
loaded from an Ollama-style store (so the logged paths look like Ollama's
``…/blobs/sha256-…``), once without a draft and once per draft, and saves what an Ollama
log parser or a llama-server engine adapter needs as test input: the complete logs,
the acceptance / synthetic-acceptance / incompatible-vocab lines, ``--version``, ``/props``,
``/metrics`` and final ``/completion`` responses (plain and streamed).

Text files start with ``#`` lines saying where they come from; everything after them is
verbatim. JSON and the event stream are verbatim from the first byte (README.md there has
their provenance).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import build
from .ollama_store import DEFAULT_NAMES, store_model_set
from .server import (
    ACCEPTANCE_LINE,
    DRAFT_N_MAX,
    N_PREDICT,
    PROMPT,
    RunningServer,
    completion_body,
    running_server,
)
from .tiny_gguf import write_model_set

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "llama_server"
# A fixed place, so that a re-capture only differs where the output really changed.
DEFAULT_WORKDIR = Path("/tmp/specbench-capture")

SYNTHETIC_WARNING = "synthetic speculative acceptance is enabled"
SYNTHETIC_LINE = "synthetic acceptance:"
INCOMPATIBLE_LINES = (
    "the target and draft vocabs are not compatible",
    "failed to initialize speculative decoding context",
)


@dataclass(frozen=True)
class Run:
    name: str  # file-name part, e.g. "draft-truncated"
    draft_role: str | None  # tiny_gguf role of the draft; None: no draft
    extra: tuple[str, ...] = ()
    details: bool = False  # also save /props, /metrics, the JSON and the stream


RUNS = (
    Run("no-draft", None, details=True),
    Run("draft-identical", "draft_identical"),
    Run("draft-truncated", "draft_truncated", details=True),
    Run("draft-unrelated", "draft_unrelated"),
    # llama-server logs an error and serves WITHOUT the draft (no draft_n in timings).
    Run("draft-incompatible", "draft_incompatible"),
    # Fake acceptance: accepts the unrelated draft's tokens at random (seeded by the request).
    Run("draft-synthetic", "draft_unrelated", extra=("--spec-synth-len", "4")),
)


@dataclass
class Capture:
    out: Path
    header: list[str]
    index: list[tuple[str, str]] = field(default_factory=list)

    def text(self, name: str, what: str, body: str, extra_header: Sequence[str] = ()) -> None:
        lines = [f"# {what}", *self.header, *extra_header, "# --- verbatim below ---"]
        (self.out / name).write_text("\n".join(lines) + "\n" + body.rstrip("\n") + "\n")
        self.index.append((name, what))

    def raw(self, name: str, what: str, body: str) -> None:
        (self.out / name).write_text(body)
        self.index.append((name, what))


def _matching(log: str, *needles: str) -> str:
    return "\n".join(line for line in log.splitlines() if any(n in line for n in needles))


def _details(capture: Capture, run: Run, server: RunningServer) -> None:
    body = completion_body()
    completion = server.post_text("/completion", body)
    json.loads(completion)  # a truncated or non-JSON body must not become a fixture
    capture.raw(f"completion-{run.name}.json", f"POST /completion {json.dumps(body)}", completion)
    stream = server.post_text("/completion", {**body, "stream": True})
    capture.raw(
        f"completion-stream-{run.name}.txt",
        "the same request with stream=true (server-sent events; timings in the last)",
        stream,
    )
    props = server.get_text("/props")
    json.loads(props)
    capture.raw(f"props-{run.name}.json", "GET /props", props)
    capture.text(f"metrics-{run.name}.txt", "GET /metrics (server run with --metrics)",
                 server.get_text("/metrics"))


def capture_all(out: Path, workdir: Path) -> None:
    binary = build.llama_server_binary()
    info = build.build_info()
    if workdir.exists():
        shutil.rmtree(workdir)
    models = write_model_set(workdir / "gguf")
    stored = store_model_set(workdir / "models", models, DEFAULT_NAMES)
    out.mkdir(parents=True, exist_ok=True)
    when = time.strftime("%Y-%m-%d", time.gmtime())
    header = [
        f"# source: PyPI sdist {build.SDIST_NAME}=={build.SDIST_VERSION} "
        f"(sha256 {build.SDIST_SHA256}), vendored llama.cpp {build.LLAMA_CPP_COMMIT}",
        f"# build: cmake {' '.join(build.CMAKE_FLAGS)} --target llama-server",
        f"# captured: {when} on {platform.system()} {platform.machine()} "
        "by python -m tests.support.realengine.capture",
    ]
    capture = Capture(out, header)
    version = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    capture.text("version.txt", "llama-server --version (stdout, then stderr)",
                 version.stdout + version.stderr)
    acceptance: list[tuple[str, str]] = []  # (run name, line)
    logs: dict[str, str] = {}
    for run in RUNS:
        draft = stored[run.draft_role].blob if run.draft_role else None
        log_path = workdir / f"{run.name}.log"
        with running_server(binary, stored["target"].blob, log_path, draft=draft,
                            extra=run.extra) as server:
            result = server.post("/completion", completion_body())
            if "draft_n" in result["timings"] and run.draft_role:
                server.wait_for_log(ACCEPTANCE_LINE)
            if run.details:
                _details(capture, run, server)
            command = server.command
        logs[run.name] = log_path.read_text()
        names = (
            f"target {DEFAULT_NAMES['target']}"
            + (f", draft {DEFAULT_NAMES[run.draft_role]} ({run.draft_role})" if run.draft_role
               else "")
        )
        # The binary's cache path says nothing about the run; its name is enough.
        shown = " ".join([Path(command[0]).name, *command[1:]])
        run_header = [
            f"# run: {shown}",
            f"# models: tiny_gguf.write_model_set (size tiny) stored as {names}",
            f"# requests: POST /completion {json.dumps(completion_body())}"
            + (" (then the same streamed)" if run.details else ""),
            f"# timings of the first request: {json.dumps(result['timings'])}",
        ]
        capture.text(f"log-{run.name}.txt", f"complete llama-server log, run {run.name}",
                     logs[run.name], run_header)
        acceptance += [
            (run.name, line) for line in logs[run.name].splitlines() if ACCEPTANCE_LINE.search(line)
        ]
    capture.text(
        "acceptance-lines.txt",
        "every 'draft acceptance' line of the runs, one per request, in run order",
        "\n".join(line for _, line in acceptance),
        [f"# line {n}: run {name}" for n, (name, _) in enumerate(acceptance, 1)],
    )
    capture.text("synthetic-warning.txt", "the --spec-synth-len 4 run's synthetic lines",
                 _matching(logs["draft-synthetic"], SYNTHETIC_WARNING, SYNTHETIC_LINE))
    capture.text("incompatible-vocab.txt",
                 "a draft with another vocab: llama-server logs these and runs without it",
                 _matching(logs["draft-incompatible"], *INCOMPATIBLE_LINES))
    _write_readme(capture, info, when)


def _write_readme(capture: Capture, info: dict[str, object], when: str) -> None:
    rows = "\n".join(f"| `{name}` | {what} |" for name, what in sorted(capture.index))
    text = f"""# Real llama-server output (test fixtures)

Captured {when} by `python -m tests.support.realengine.capture` (re-run it to refresh; it
rewrites every file here). Nothing here is hand-edited.

- Source: PyPI sdist `{build.SDIST_NAME}=={build.SDIST_VERSION}` (sha256
  `{build.SDIST_SHA256}`), vendoring llama.cpp commit `{build.LLAMA_CPP_COMMIT}`.
- Build (tests/support/realengine/build.py): `cmake {" ".join(build.CMAKE_FLAGS)}`, target
  `llama-server`; `--version`: `{str(info.get("version_output", "")).splitlines()[0]}`.
- Models: `tests/support/realengine/tiny_gguf.py` `write_model_set(size="tiny")` (seeded,
  reproducible), stored as an Ollama models folder under `ollama_store.DEFAULT_NAMES`, so
  the logged model paths are `…/models/blobs/sha256-…` as in Ollama's runs.
- Scenario: prompt `{PROMPT!r}`, greedy, `n_predict` {N_PREDICT}, `ignore_eos`,
  `--spec-type draft-simple --spec-draft-n-max {DRAFT_N_MAX} --spec-draft-n-min 0
  --spec-draft-p-min 0`, one thread, `--poll 0`, on {platform.system()} {platform.machine()}.

Text files (`.txt`) start with `#` lines giving their provenance and the exact command;
everything after `# --- verbatim below ---` is verbatim. `.json` files and the event stream
`completion-stream-*.txt` are verbatim from the first byte.
`tests.support.realengine.fixture_files.verbatim(name)` returns the verbatim part of any of
them, `provenance(name)` the header lines.

Worth knowing when parsing: with a draft whose vocab does not match, llama-server logs two
error lines and then serves *without* the draft (`log-draft-incompatible.txt`: no
`draft_n` in the timings, no acceptance line); `--spec-synth-len` accepts drafted tokens at
random and announces it with a `W` line (`synthetic-warning.txt`).

| file | what |
|---|---|
{rows}
"""
    (capture.out / "README.md").write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.realengine.capture")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    args = parser.parse_args(argv)
    capture_all(args.out, args.workdir)
    sys.stdout.write(f"wrote {args.out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
