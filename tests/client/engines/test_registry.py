"""The adapter registry: every adapter has a descriptor and owns its options (its own class,
the flags that set its fields); a flag goes to the engines that own it, and the CLI names
only what the registry holds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from specschema.engines import ENGINES
from specsubmit.engines.llama_server.options import LlamaServerOptions
from specsubmit.engines.registry import ADAPTERS, adapter, engine_options
from specsubmit.errors import UsageError


def test_every_adapter_has_its_descriptor_and_owns_its_flags() -> None:
    assert set(ADAPTERS) <= set(ENGINES)
    owners: dict[str, str] = {}
    for chosen in ADAPTERS.values():
        assert chosen.summary and chosen.flags
        fields = {f.name for f in dataclasses.fields(chosen.options())}
        assert "timeout_s" in fields
        for flag in chosen.flags:
            assert flag.name.startswith("--") and flag.field in fields
            assert owners.setdefault(flag.name, chosen.name) == chosen.name  # one owner


def test_an_unknown_engine_lists_the_registered_ones() -> None:
    with pytest.raises(UsageError, match="--engine must be one of ollama, llama-server"):
        adapter("vllm")


def test_each_engine_gets_its_own_options_from_the_flags_given() -> None:
    given = {"--llama-server": Path("/bin/ls"), "--ollama-models": Path("/m"),
             "--llama-threads": 3, "--engine-url": None, "--no-log": False}
    assert engine_options(adapter("llama-server"), given, timeout_s=9.0) == LlamaServerOptions(
        timeout_s=9.0, binary=Path("/bin/ls"), models_dir=Path("/m"), threads=3)
    ollama = engine_options(adapter("ollama"), {"--ollama": "127.0.0.1:11500",
                                                "--no-log": True})
    assert (ollama.host, ollama.no_log, ollama.log) == ("127.0.0.1:11500", True, None)
    assert adapter("ollama").lock(ollama) == ("ollama http://127.0.0.1:11500",
                                              "Ollama at http://127.0.0.1:11500")


def test_an_option_for_another_engine_names_the_engine_that_takes_it() -> None:
    with pytest.raises(UsageError, match="--llama-threads needs --engine llama-server"):
        engine_options(adapter("ollama"), {"--llama-threads": 2})
    with pytest.raises(UsageError, match="--ollama-models needs --engine llama-server"):
        engine_options(adapter("ollama"), {"--ollama-models": Path("/m")})
    with pytest.raises(UsageError, match="--no-log needs --engine ollama"):
        engine_options(adapter("llama-server"), {"--no-log": True})
    with pytest.raises(UsageError, match="--llama-threads must be between 1 and 1024"):
        engine_options(adapter("llama-server"), {"--llama-threads": 0})


def test_options_often_set_in_the_environment_do_not_stop_another_engine() -> None:
    # OLLAMA_HOST and SPECSUBMIT_OLLAMA_LOG are set on many machines.
    engine_options(adapter("llama-server"), {"--ollama": "127.0.0.1:11434",
                                             "--ollama-log": "/tmp/server.log"})
    with pytest.raises(UsageError):
        engine_options(adapter("ollama"), {"--ollama": "ftp://127.0.0.1"})
