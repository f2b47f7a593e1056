"""The adapter registry: every adapter has a descriptor, options go to the engines that
take them, and the CLI names only what the registry holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from specschema.engines import ENGINES
from specsubmit.engines.base import OPTION_FLAGS, EngineOptions
from specsubmit.engines.registry import ADAPTERS, adapter, check_options
from specsubmit.errors import UsageError


def test_every_adapter_has_its_descriptor_and_takes_known_options() -> None:
    assert set(ADAPTERS) <= set(ENGINES)
    for chosen in ADAPTERS.values():
        assert chosen.accepts <= set(OPTION_FLAGS) and chosen.summary


def test_an_unknown_engine_lists_the_registered_ones() -> None:
    with pytest.raises(UsageError, match="--engine must be one of ollama, llama-server"):
        adapter("vllm")


def test_an_option_for_another_engine_names_the_engine_that_takes_it() -> None:
    with pytest.raises(UsageError, match="--llama-threads needs --engine llama-server"):
        check_options(adapter("ollama"), EngineOptions(llama_threads=2))
    with pytest.raises(UsageError, match="--ollama-models needs --engine llama-server"):
        check_options(adapter("ollama"), EngineOptions(ollama_models=Path("/m")))
    with pytest.raises(UsageError, match="--llama-threads must be between 1 and 1024"):
        check_options(adapter("llama-server"), EngineOptions(llama_threads=0))


def test_options_often_set_in_the_environment_do_not_stop_another_engine() -> None:
    # OLLAMA_HOST and SPECSUBMIT_OLLAMA_LOG are set on many machines.
    check_options(adapter("llama-server"), EngineOptions(ollama="127.0.0.1:11434",
                                                         ollama_log="/tmp/server.log"))
    with pytest.raises(UsageError):
        check_options(adapter("ollama"), EngineOptions(ollama="ftp://127.0.0.1"))
