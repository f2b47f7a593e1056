"""llama-server behind the runner's ``Engine`` interface: one server start per config.

Current llama-server builds ignore per-request speculative fields (``#if 0`` in
``server-schema.cpp``), so a config's speculation is its command line: the baseline starts
without ``--spec-type``, a config that speculates with its ``spec_type``: ``draft-simple``
with ``--spec-draft-model FILE --spec-draft-n-max N`` (the default when a config names a
draft model), the draftless n-gram types with their own knobs (``SPEC_FLAGS``), or
``draft-mtp`` with the target's own MTP layers (a target whose GGUF header declares none is
refused before any start). The protocol says which through its options: the generation
options go into every /completion body, the launch options onto the command line.

Evidence comes from the engine's own API: ``timings.draft_n`` / ``draft_n_accepted`` per
request (absent: that request did not speculate), the rounds and accepted tokens per draft
position from ``/metrics`` read around each request (``metrics.py``), and what the client
launched (a ``Launch`` per start, the draft named by digest). A result records the command
line with every path replaced by its file's digest, and the build (``--version`` and
``/props``).
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

from specschema import Engine, Fingerprint, engine_can_honor
from specschema.protocol import ProtocolConfig
from specsubmit.engines.base import (
    EngineName,
    EngineReport,
    Generation,
    Preflight,
    RunListener,
    RunSettings,
    wire_version,
)
from specsubmit.engines.llama_server import launch, logtext, process
from specsubmit.engines.llama_server.api import LlamaServerApi, StreamBroken
from specsubmit.engines.llama_server.binary import Binary, find_binary
from specsubmit.engines.llama_server.compatibility import vocab_mismatch
from specsubmit.engines.llama_server.gguf_header import GgufHeader, read_header
from specsubmit.engines.llama_server.metrics import SpecMetrics, parse_spec_metrics, with_rounds
from specsubmit.engines.llama_server.store import ResolvedModel, default_models_dir, resolve_model
from specsubmit.engines.llama_server.threads import default_threads
from specsubmit.engines.memory import available_memory, check_memory
from specsubmit.errors import (
    BadModelFile,
    EngineDied,
    EngineStartFailed,
    IncompatibleVocab,
    LlamaServerError,
    ModelNotInStore,
    SpeculationRefused,
    UsageError,
)

if TYPE_CHECKING:
    from specschema import Launch

BIND_TRIES = 3
_VERSION = re.compile(r"version:\s*(\S+)")


class LlamaServerEngine:
    """Starts, talks to and stops llama-server; use as a context manager."""

    name: EngineName = "llama-server"
    per_config_start = True
    load_time_options: frozenset[str] = frozenset()  # every config is its own start

    def __init__(
        self,
        settings: RunSettings,
        *,
        binary: Path | None = None,
        models_dir: Path | None = None,
        timeout_s: float = 600.0,
        startup_timeout_s: float = 300.0,
        threads: int | None = None,
        port_picker: Callable[[], int] | None = None,
        which: Callable[[str], str | None] = shutil.which,
    ) -> None:
        self.settings, self.protocol = settings, settings.protocol
        self.binary_flag, self.which = binary, which
        self.models_dir = (models_dir.expanduser() if models_dir else default_models_dir())
        self.timeout_s, self.startup_timeout_s = timeout_s, startup_timeout_s
        self.threads, self.port_picker = threads, port_picker
        self.extra_args: list[str] = []  # besides the protocol's (the probe's --swa-full)
        self.binary: Binary | None = None
        self.models: dict[str, ResolvedModel] = {}
        self.headers: dict[str, GgufHeader] = {}
        self.launches: dict[str, list[Launch]] = {}
        self.commands: dict[str, list[str]] = {}
        self.props_build: str | None = None
        # Server CPU seconds per config, read just before each stop (not on the wire: the
        # real-engine tests and bench/engine_ab.py compare them; None where unreadable).
        self.cpu_seconds: dict[str, float | None] = {}
        self.prompts: dict[str, str] = {}  # a prompt -> in the target's chat template
        self._process: subprocess.Popen[bytes] | None = None
        self._api: LlamaServerApi | None = None
        self._log_dir = Path(tempfile.mkdtemp(prefix="specsubmit-llama-"))
        self._log_path: Path | None = None
        self._previous_sigterm: object = None

    # --- lifetime ---------------------------------------------------------------------

    def __enter__(self) -> LlamaServerEngine:
        # SIGTERM's default action ends Python without running finally blocks or atexit;
        # as SystemExit it stops the server on the way out like any other exit.
        if threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                self._previous_sigterm = signal.signal(signal.SIGTERM, _sigterm)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._stop_server()
        shutil.rmtree(self._log_dir, ignore_errors=True)
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)  # type: ignore[arg-type]
            self._previous_sigterm = None

    # --- pre-flight -------------------------------------------------------------------

    def _version(self, binary: Binary) -> tuple[str, str]:
        try:
            result = subprocess.run([str(binary.path), "--version"], capture_output=True,
                                    text=True, timeout=60, check=False,
                                    env=process.clean_env(binary.library_dir))
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EngineStartFailed(f"{binary.path} does not run: {exc}") from None
        output = (result.stdout + result.stderr).strip()
        match = _VERSION.search(output)
        if result.returncode != 0 or not match:
            raise EngineStartFailed(logtext.version_failure(binary.path, result.returncode, output))
        build = " ".join(line.strip() for line in output.splitlines() if line.strip())
        return match.group(1), build[:200]

    def _check_options(self) -> None:
        known = launch.KNOWN_OPTIONS
        for config in self.protocol.configs:
            unknown = sorted(set(self.protocol.request_options(config)) - known)
            if unknown:
                raise UsageError(f"protocol {self.protocol.id} sets {', '.join(unknown)}, "
                                 "which llama-server has no setting for")
            kind = launch.spec_type(self.protocol, config)
            if config.role == "draft" and kind is None:
                raise UsageError(f"{config.name}: a llama-server draft config needs a "
                                 "draft_model or a spec_type")
            if kind in launch.DRAFT_MODEL_TYPES and config.draft_model is None:
                raise UsageError(f"{config.name}: --spec-type {kind} needs a draft model")

    def preflight(self, fingerprint: Fingerprint, listener: RunListener,
                  stop: threading.Event | None = None) -> Preflight:
        self._check_options()
        self.binary = find_binary(self.binary_flag, which=self.which)
        version, build = self._version(self.binary)
        listener.phase(f"llama-server {version} ({self.binary.source}: {self.binary.path})")
        if self.threads is None:
            # Before any server of ours runs: the load it sees is other work's.
            self.threads = default_threads()
            listener.phase(f"llama-server threads: {self.threads} (the physical cores less "
                           "those busy with other work; --llama-threads N to choose)")
        target = self.protocol.model_for(self.protocol.baseline(), self.settings.target)
        self.models[target] = resolve_model(target, self.models_dir)
        self.headers[target] = read_header(self.models[target].path)
        refused, first_error = self._check_drafts(target, listener)
        refused.update(self._check_mtp(target, listener))
        draft_configs = [c for c in self.protocol.configs if c.role == "draft"]
        if draft_configs and all(c.name in refused for c in draft_configs) and first_error:
            # Nothing but the baseline could run: that measures nothing worth a result.
            raise first_error
        can_honor = {c.name: engine_can_honor(c.mechanism, version, self.name)
                     for c in self.protocol.configs}
        public = {name: m.name for name, m in self.models.items() if m.source == "path"}
        infos = [logtext.model_info(public.get(name, name), digest=self.models[name].digest,
                                    size=self.models[name].size, header=self.headers[name])
                 for name in self.models]
        # One config runs at a time: the target plus the biggest draft.
        drafts = [self.models[n].size for n in self.models if n != target]
        needed = self.models[target].size + max(drafts, default=0)
        if self.protocol.requirements.memory_bytes:
            needed = max(needed, self.protocol.requirements.memory_bytes)
        available = available_memory(fingerprint)
        check_memory(needed, available, self.settings.assume_yes, listener)
        return Preflight(version, infos, can_honor, needed, available,
                         engine_name="llama-server", build=build, public_names=public,
                         refused=refused)

    def _check_drafts(self, target: str, listener: RunListener
                      ) -> tuple[dict[str, str], LlamaServerError | None]:
        """Each draft config's model found, loadable and accepted by llama.cpp's rule for
        the target; the ones that are not are refused (reason in words, no path)."""
        refused: dict[str, str] = {}
        first: LlamaServerError | None = None
        target_public = self._public_name(target)
        for config in self.protocol.configs:
            name = config.draft_model
            if name is None:
                continue
            error: LlamaServerError | None = None
            public = ""
            try:
                if name not in self.models:
                    self.models[name] = resolve_model(name, self.models_dir)
                if name not in self.headers:
                    self.headers[name] = read_header(self.models[name].path)
            except ModelNotInStore as exc:
                error = exc
                public = (f"the draft model {name} is not in the models folder (run `ollama "
                          f"pull {name}`)")
            except BadModelFile as exc:
                error = exc
                public = f"the draft model {name} is not a loadable GGUF file"
            else:
                why = vocab_mismatch(self.headers[target], self.headers[name])
                if why:
                    public = (f"llama.cpp refuses {name} as a draft for {target_public}: their "
                              f"vocabularies differ ({why}), and llama-server would serve "
                              "without the draft")
                    error = IncompatibleVocab(
                        f"{config.name}: {name} cannot draft for {target_public}, their "
                        f"vocabularies differ ({why}); llama-server would run without the draft")
            if error is None:
                continue
            refused[config.name] = public
            first = first or error
            listener.warning(f"{config.name}: {error.message}; recorded as incompatible and "
                             "not run, the other configs run as usual")
        return refused, first

    def _check_mtp(self, target: str, listener: RunListener) -> dict[str, str]:
        """The draft-mtp configs, refused when the target's GGUF declares no MTP layers
        (``<architecture>.nextn_predict_layers``): llama.cpp has nothing to draft with."""
        header = self.headers[target]
        if header.mtp_layers:
            return {}
        refused: dict[str, str] = {}
        for config in self.protocol.configs:
            if launch.spec_type(self.protocol, config) == launch.MTP_TYPE:
                refused[config.name] = (f"{self._public_name(target)} has no MTP layers (its "
                                        "GGUF header declares no nextn_predict_layers), so "
                                        "llama.cpp has nothing to draft with")
                listener.warning(f"{config.name}: {refused[config.name]}; recorded as "
                                 "incompatible and not run, the other configs run as usual")
        return refused

    def _public_name(self, name: str) -> str:
        model = self.models.get(name)
        return model.name if model is not None and model.source == "path" else name

    def _public_text(self, text: str) -> str:
        """A log line as a result may carry it: model paths as digests, no other path."""
        for model in self.models.values():
            text = text.replace(str(model.path), f"sha256:{model.digest[:16]}")
        return re.sub(r"(?<![\w.])/(?:[^\s'\"/]+/)+[^\s'\"]*", "…", text)[:240]

    # --- one config: start, requests, stop ----------------------------------------------

    def launch_args(self, config: ProtocolConfig, port: int) -> list[str]:
        options = self.protocol.request_options(config)
        target = self.models[self.protocol.model_for(config, self.settings.target)]
        args = ["--model", str(target.path), "--host", process.HOST, "--port", str(port),
                "--parallel", "1",
                # The default busy-wait halves drafted-run speed on few cores (real-engine.md).
                "--poll", "0",
                # The protocol's warm-ups warm the server; its own warm-up would only add a
                # request that no result accounts for.
                "--no-warmup"]
        if self.threads:
            args += ["--threads", str(self.threads), "--threads-batch", str(self.threads)]
        args += ["--ctx-size", str(options["num_ctx"])]
        # The speculative counters per draft position are read there (metrics.py).
        args += ["--metrics"]
        for flag, value in launch.pinned_flags(self.protocol, config).items():
            args += [f"--{flag}", value]
        draft = self.models[config.draft_model] if config.draft_model is not None else None
        return args + self.extra_args + launch.spec_args(
            self.protocol, config, str(draft.path) if draft is not None else None)

    def redacted(self, args: Sequence[str]) -> list[str]:
        """The command line as a result may show it: files as digests, no paths."""
        by_path = {str(m.path): f"sha256:{m.digest}" for m in self.models.values()}
        return ["llama-server", *(by_path.get(a, a) for a in args)]

    def begin_config(self, config: ProtocolConfig, listener: RunListener) -> None:
        assert self.binary is not None, "preflight() first"
        self._stop_server()
        log_path = self._log_dir / f"{config.name}.log"
        for attempt in range(1, BIND_TRIES + 1):
            port = (self.port_picker or process.free_port)()
            args = self.launch_args(config, port)
            self._log_path = log_path
            self._process = process.spawn([str(self.binary.path), *args], log_path,
                                          process.clean_env(self.binary.library_dir))
            self._api = LlamaServerApi(f"http://{process.HOST}:{port}",
                                       timeout_s=self.timeout_s)
            if process.wait_until(self._api.healthy, self._process, self.startup_timeout_s):
                break
            tail = process.log_tail(log_path)
            self._stop_server()
            if any("couldn't bind" in line for line in tail):
                if attempt < BIND_TRIES:
                    continue
                raise EngineStartFailed(
                    f"llama-server could not listen on {process.HOST}:{port}: the port is in "
                    f"use ({BIND_TRIES} ports tried)")
            loaded = [line for line in tail if "failed to load draft model" in line]
            if config.draft_model is not None and loaded:
                raise SpeculationRefused(
                    f"{config.name}: llama-server could not load the draft "
                    f"{config.draft_model}: {logtext.error_lines(tail)}", config=config.name,
                    public=f"llama-server could not load the draft model {config.draft_model}: "
                    f"{self._public_text(logtext.error_lines(tail))}")
            said = logtext.logged_lines([line for line in tail if "MTP" in line])
            if launch.spec_type(self.protocol, config) == launch.MTP_TYPE and \
                    logtext.MTP_REFUSED in said:
                raise SpeculationRefused(
                    f"{config.name}: llama-server could not start MTP speculation: {said}",
                    config=config.name, public="llama-server could not start MTP "
                    f"speculation for this target: {self._public_text(said)}")
            model = config.draft_model or self.protocol.model_for(config, self.settings.target)
            raise EngineStartFailed(
                f"llama-server did not start for {config.name} (model {model}): "
                f"{logtext.error_lines(tail)}")
        self.commands[config.name] = self.redacted(args)
        draft = self.models[config.draft_model] if config.draft_model is not None else None
        self.launches.setdefault(config.name, []).append(launch.launch_record(
            self.protocol, config, threads=self.threads,
            draft_digest=draft.digest if draft is not None else None))
        listener.launched(config.name, self.commands[config.name])
        if launch.spec_type(self.protocol, config) is not None:
            self._check_draft_loaded(config)
        assert self._api is not None
        props = self._api.props()
        build_info = props.get("build_info")
        if isinstance(build_info, str) and build_info:
            self.props_build = build_info[:100]

    def _check_draft_loaded(self, config: ProtocolConfig) -> None:
        """llama-server keeps serving, without speculation, when it cannot use the draft:
        its log says so, and ``/slots`` shows ``speculative: false``. Either is a refusal."""
        assert self._log_path is not None and self._api is not None
        lines = process.log_tail(self._log_path, 400)
        refused = [line for line in lines
                   if any(s in line for s in logtext.SPEC_REFUSED) or logtext.SPEC_WHY.search(line)]
        said = logtext.logged_lines(refused)
        if not said:
            slots = self._api.slots()
            if slots is not None and not any(slot.get("speculative") is True for slot in slots):
                said = "/slots shows speculative: false after the start"
        if said:
            self._stop_server()
            target = self._public_name(self.protocol.model_for(config, self.settings.target))
            draft, kind = config.draft_model, launch.spec_type(self.protocol, config)
            raise SpeculationRefused(
                f"{config.name}: llama-server refused "
                f"{f'the draft {draft}' if draft else f'--spec-type {kind}'}: {said}",
                config=config.name, public="llama-server started without speculation: it "
                f"refused {f'{draft} as a draft' if draft else f'--spec-type {kind}'} for "
                f"{target} ({self._public_text(said)})")

    def templated(self, prompt: str) -> str:
        """The prompt in the target's chat template, asked of the server once per prompt."""
        found = self.prompts.get(prompt)
        if found is None and self._api is not None:  # no server yet: the prompt as it is
            found = self.prompts[prompt] = self._api.apply_template(prompt) or prompt
        return found or prompt

    def request_body(self, config: ProtocolConfig, prompt: str | None = None, *,
                     warmup: bool = False) -> dict[str, Any]:
        return launch.request_body(self.protocol, config, self.templated(
            self.protocol.prompt if prompt is None else prompt), warmup=warmup)

    def generate(self, config: ProtocolConfig, *, counted: bool,
                 prompt: str | None = None) -> Generation:
        if self._api is None or self._process is None:
            raise EngineDied(f"llama-server is not running for {config.name}")
        try:
            body = self.request_body(config, prompt, warmup=not counted)
            before = self._spec_metrics()
            generation = self._api.completion(body)
            after = self._spec_metrics() if before is not None else None
            counts = after.since(before) if after is not None and before is not None else None
            return with_rounds(generation, counts)
        except StreamBroken as exc:
            code = process.exit_code_within(self._process)
            if code is not None:
                assert self._log_path is not None
                tail = process.log_tail(self._log_path)
                raise EngineDied(
                    f"llama-server exited (code {code}) during a {config.name} request: "
                    f"{logtext.error_lines(tail) if tail else 'no output'}") from None
            raise EngineDied(f"{exc.message} during a {config.name} request") from None

    def end_config(self, config: ProtocolConfig, *, last: bool) -> None:
        if self._process is not None:
            used = process.cpu_seconds(self._process)
            before = self.cpu_seconds.get(config.name, 0.0)
            self.cpu_seconds[config.name] = (None if used is None or before is None
                                             else before + used)
        self._stop_server()

    @property
    def api(self) -> LlamaServerApi:  # the running server's (begin_config first)
        if self._api is None:
            raise EngineDied("llama-server is not running")
        return self._api

    def _spec_metrics(self) -> SpecMetrics | None:
        assert self._api is not None
        text = self._api.metrics_text()
        return parse_spec_metrics(text) if text is not None else None

    def _stop_server(self) -> None:
        if self._api is not None:
            self._api.close()
            self._api = None
        if self._process is not None:
            process.stop(self._process)
            self._process = None

    def report(self, pre: Preflight, listener: RunListener) -> EngineReport:
        build = pre.build
        if self.props_build and (not build or self.props_build not in build):
            build = f"{self.props_build}; {build}" if build else self.props_build
        return EngineReport(launches=self.launches, build=build[:200] if build else None)

    def wire_engine(self, pre: Preflight, report: EngineReport) -> tuple[Engine, str | None]:
        """The version (a build number), the build (``--version`` and ``/props``), ggml;
        no log is read (the counters are the API's)."""
        version = wire_version(pre.engine_version)
        build = (report.build or pre.build or "")[:200] or None
        return Engine(name=self.name, version=version, build=build, runtime="ggml"), None


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)
