"""The one exception hierarchy of specsubmit. The CLI turns each into one line on
stderr and an exit code in ``specsubmit.cli.main`` (and nowhere else).

    SpecSubmitError                 exit 1 unless noted
    ├── UsageError                  exit 2: bad flags or arguments
    ├── OllamaError                 anything from talking to Ollama
    │   ├── OllamaUnreachable       nothing listening at the URL
    │   ├── ModelMissing            404 for a model (names the --pull flag)
    │   ├── OllamaStreamError       an {"error": ...} line inside a 200 stream, or no `done`
    │   └── OllamaTimeout
    ├── RunAborted                  the run stopped early (Ctrl-C: exit 130)
    ├── ResultFileError             a saved result cannot be read
    ├── KeyStoreError               the contributor key cannot be read or written
    └── SubmitError                 signing or sending failed
        ├── SubmissionRejected      the server said no (4xx other than 429)
        └── SubmissionUndelivered   not delivered after retries; the envelope waits in pending/
"""

from __future__ import annotations


class SpecSubmitError(Exception):
    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UsageError(SpecSubmitError):
    exit_code = 2


class OllamaError(SpecSubmitError):
    pass


class OllamaUnreachable(OllamaError):
    pass


class ModelMissing(OllamaError):
    pass


class OllamaStreamError(OllamaError):
    pass


class OllamaTimeout(OllamaError):
    pass


class RunAborted(SpecSubmitError):
    exit_code = 130


class ResultFileError(SpecSubmitError):
    pass


class KeyStoreError(SpecSubmitError):
    pass


class SubmitError(SpecSubmitError):
    pass


class SubmissionRejected(SubmitError):
    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class SubmissionUndelivered(SubmitError):
    pass
