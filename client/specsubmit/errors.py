"""The one exception hierarchy of specsubmit. The CLI turns each into one line on
stderr and an exit code in ``specsubmit.cli.main`` (and nowhere else).

    SpecSubmitError                 exit 1 unless noted
    ├── UsageError                  exit 2: bad flags or arguments
    ├── EngineError                 anything from running or talking to an engine: a run
    │   │                           that fails with one keeps its partial result
    │   ├── OllamaError             anything from talking to Ollama
    │   │   ├── OllamaUnreachable   nothing listening at the URL
    │   │   ├── ModelMissing        404 for a model (names the --pull flag)
    │   │   ├── OllamaStreamError   an {"error": ...} line inside a 200 stream, or no `done`
    │   │   ├── OllamaTimeout
    │   │   └── OllamaLogMissing    no readable server log and no --no-log: drafts could
    │   │                           not be confirmed (said before the first request)
    │   ├── EngineUnreachable       nothing answers where an HTTP engine should listen
    │   ├── EngineModelMissing      the engine does not have a model the protocol names
    │   └── LlamaServerError        the llama-server the client starts itself
    │       ├── EngineNotFound      no llama-server binary (flag, Ollama's bundled one, PATH)
    │       ├── ModelNotInStore     an Ollama name without a manifest/blob in $OLLAMA_MODELS
    │       ├── BadModelFile        a model file that is not a loadable GGUF
    │       ├── IncompatibleVocab   a draft whose vocabulary the target's does not match
    │       ├── SpeculationRefused  llama-server cannot run one draft config as asked (its
    │       │                       draft refused or missing): the runner records that
    │       │                       config as incompatible and runs the others
    │       ├── EngineStartFailed   llama-server exited or stayed unhealthy at start
    │       └── EngineDied          llama-server exited or broke off during a request
    ├── EngineBusy                  another specsubmit run holds this engine's lock
    │                               (local/enginelock.py): refused before any request
    ├── RunAborted                  exit 130: Ctrl-C (the run stopped early, or at the
    │                               consent prompt)
    ├── BudgetTooShort              --budget cannot fit even the fewest rounds: said after
    │                               the first block's start and warm-up, before any trial
    ├── ResultFileError             a saved result cannot be read
    ├── KeyStoreError               the contributor key cannot be read or written
    ├── StateFolderError            the state folder (SPECSUBMIT_HOME) cannot be written
    └── SubmitError                 signing or sending failed
        ├── ServerUnreachable       exit 69: --server does not answer as a specatlas server
        │                           (checked before any trial runs)
        ├── SubmissionRejected      the server said no (4xx other than 429)
        ├── SubmissionUndelivered   exit 75: not delivered after retries; the envelope waits
        │                           in pending/ for `specsubmit submit --pending`
        └── LogUnchecked            exit 75: a receipt could not be checked against the
            │                       server's transparency log yet (unreachable, not yet in
            │                       its newest checkpoint)
            └── LogMisbehavior      exit 3: the log contradicts itself or a receipt: a
                                    checkpoint not signed by the pinned key, a shrunk or
                                    forked tree, a receipt's entry missing; the proof is
                                    printed before

Exit codes 69 and 75 are sysexits.h's EX_UNAVAILABLE and EX_TEMPFAIL ("try again later").
"""

from __future__ import annotations


class SpecSubmitError(Exception):
    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(SpecSubmitError):
    exit_code = 2


class EngineError(SpecSubmitError):
    pass


class OllamaError(EngineError):
    pass


class OllamaUnreachable(OllamaError):
    pass


class ModelMissing(OllamaError):
    pass


class OllamaLogMissing(OllamaError):
    pass


class OllamaStreamError(OllamaError):
    pass


class OllamaTimeout(OllamaError):
    pass


class EngineUnreachable(EngineError):
    """Nothing answers where an engine reached over HTTP should listen (any engine but
    Ollama, whose errors are its own)."""


class EngineModelMissing(EngineError):
    """The engine does not list a model the protocol needs (the message says the fix)."""


class LlamaServerError(EngineError):
    pass


class EngineNotFound(LlamaServerError):
    pass


class ModelNotInStore(LlamaServerError):
    pass


class BadModelFile(LlamaServerError):
    pass


class IncompatibleVocab(LlamaServerError):
    pass


class SpeculationRefused(LlamaServerError):
    """``message`` is the local line (it may name folders); ``public`` is the reason as a
    result may carry it (model names and digests, never a path)."""

    def __init__(self, message: str, *, config: str = "", public: str = "") -> None:
        super().__init__(message)
        self.config = config
        self.public = public or message


class EngineStartFailed(LlamaServerError):
    pass


class EngineDied(LlamaServerError):
    pass


class EngineBusy(SpecSubmitError):
    pass


class RunAborted(SpecSubmitError):
    exit_code = 130


class BudgetTooShort(SpecSubmitError):
    pass


class ResultFileError(SpecSubmitError):
    pass


class KeyStoreError(SpecSubmitError):
    pass


class StateFolderError(SpecSubmitError):
    pass


class SubmitError(SpecSubmitError):
    pass


class SubmissionRejected(SubmitError):
    def __init__(self, message: str, status: int = 0,
                 log_entry: tuple[int, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        # where the server's transparency log holds the refusal (index, base64 leaf hash),
        # from the answer's Log-Entry header: a refusal after the signature verified
        self.log_entry = log_entry


class ServerUnreachable(SubmitError):
    exit_code = 69


class SubmissionUndelivered(SubmitError):
    exit_code = 75


class LogUnchecked(SubmitError):
    exit_code = 75


class LogMisbehavior(LogUnchecked):
    exit_code = 3
