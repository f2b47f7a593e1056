"""Children that take a Ctrl-C as they would from a terminal, however the tests were started.

A shell starts a background job (``cmd &``, ``nohup``, a runner without job control) with
SIGINT ignored; an ignored signal stays ignored across fork and exec, and CPython installs
its KeyboardInterrupt handler only when SIGINT is at its default at start-up. So under a
test run started that way every child ignores the SIGINT a test sends it, and a child
waiting at a prompt waits forever. That, not load, is why the Ctrl-C-at-consent tests
failed in suites run in the background and passed by hand (reproduced with
``sh -c 'pytest ... &'``).

A test that sends SIGINT starts its child through ``interruptible``: the command is exec'd
by a tiny Python that first puts SIGINT back to its default, as an interactive shell does
for a foreground job. Exec keeps a default disposition, so the child's own start-up then
installs its handler exactly as on a contributor's terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

_RESET_AND_EXEC = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                   "os.execv(sys.argv[1], sys.argv[1:])")


def interruptible(command: Sequence[str]) -> list[str]:
    """``command`` (an absolute executable first) run with SIGINT at its default."""
    return [sys.executable, "-c", _RESET_AND_EXEC, *command]
