"""Models for llama-server: a GGUF path, or an Ollama model name looked up READ-ONLY in an
Ollama models folder (``$OLLAMA_MODELS``, default ``~/.ollama/models``).

Layout (Ollama's ``manifest/paths.go``)::

    manifests/registry.ollama.ai/<namespace>/<model>/<tag>   JSON, layers[] with mediaType
    blobs/sha256-<hex>                                       the bytes, named by digest

The model is the layer of mediaType ``application/vnd.ollama.image.model``. Nothing here
writes, creates or locks anything in that folder: files are only opened for reading, and a
name is checked before it becomes a path, so ``../`` or an absolute digest cannot leave it.
An Ollama blob's digest is its file name (Ollama checked it when it pulled); a GGUF given by
path is hashed here, because its digest is what a result records instead of the path.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from specsubmit.errors import BadModelFile, ModelNotInStore

REGISTRY = "registry.ollama.ai"
MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,127}$")
_DIGEST = re.compile(r"^sha256[:\-]([0-9a-f]{64})$")
MAX_MANIFEST_BYTES = 1 << 20


@dataclass(frozen=True)
class ResolvedModel:
    name: str  # as the protocol names it (an Ollama name, or the GGUF file's name)
    path: Path  # the GGUF file llama-server opens
    digest: str  # sha256 hex of the file, never its path, goes into a result
    size: int
    source: str  # "ollama" or "path"


def default_models_dir() -> Path:
    env = os.environ.get("OLLAMA_MODELS")
    return Path(env).expanduser() if env else Path("~/.ollama/models").expanduser()


def is_gguf_path(name: str) -> bool:
    """A file rather than an Ollama name (``user/model:tag`` has a slash too)."""
    return name.endswith(".gguf") or name.startswith(("/", ".", "~"))


def split_name(name: str) -> tuple[str, str, str]:
    """(namespace, model, tag) of ``[namespace/]model[:tag]``; the tag defaults to latest.
    A host prefix (``registry.ollama.ai/library/qwen3``) is accepted only for Ollama's own
    registry, the one folder this client reads."""
    path, _, tag = name.partition(":")
    parts = path.split("/")
    if len(parts) == 3 and parts[0] == REGISTRY:
        parts = parts[1:]
    if len(parts) == 1:
        parts = ["library", *parts]
    tag = tag or "latest"
    if len(parts) != 2 or not all(_PART.match(p) for p in (*parts, tag)):
        raise ModelNotInStore(f"{name!r} is not an Ollama model name (like qwen3:0.6b)")
    return parts[0], parts[1], tag


def _read_manifest(path: Path, name: str) -> dict[str, object]:
    try:
        with path.open("rb") as handle:  # read-only: the store is never written
            data = handle.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        raise ModelNotInStore(
            f"model '{name}' is not in the Ollama models folder {path.parents[4]} — run "
            f"`ollama pull {name}`, pass --ollama-models DIR, or give a GGUF path") from None
    except OSError as exc:
        raise ModelNotInStore(f"cannot read the manifest of '{name}': {exc.strerror}") from None
    try:
        manifest = json.loads(data) if len(data) <= MAX_MANIFEST_BYTES else None
    except ValueError:
        manifest = None
    if not isinstance(manifest, dict):
        raise ModelNotInStore(f"the manifest of '{name}' at {path} is not a JSON object")
    return manifest


def resolve_ollama(models_dir: Path, name: str) -> ResolvedModel:
    namespace, model, tag = split_name(name)
    manifest_path = models_dir / "manifests" / REGISTRY / namespace / model / tag
    manifest = _read_manifest(manifest_path, name)
    layers = manifest.get("layers")
    digest = None
    for layer in layers if isinstance(layers, list) else []:
        if isinstance(layer, dict) and layer.get("mediaType") == MODEL_MEDIA_TYPE:
            match = _DIGEST.match(str(layer.get("digest") or ""))
            digest = match.group(1) if match else None
            break
    if digest is None:
        raise ModelNotInStore(f"'{name}' in {models_dir} has no GGUF model layer "
                              "(a safetensors/MLX model cannot run on llama-server)")
    blob = models_dir / "blobs" / f"sha256-{digest}"
    try:
        size = blob.stat().st_size
    except OSError:
        raise ModelNotInStore(
            f"the model file of '{name}' (blobs/sha256-{digest[:12]}…) is missing from "
            f"{models_dir} — run `ollama pull {name}` again") from None
    return ResolvedModel(name, blob, digest, size, "ollama")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def resolve_path(name: str) -> ResolvedModel:
    path = Path(name).expanduser()
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):  # a FIFO would be waited on, a device read forever
            raise BadModelFile(f"the model file {path} is not a regular file (a pipe, socket "
                               "or device)")
        size = info.st_size
        digest = file_sha256(path)
    except OSError as exc:
        raise BadModelFile(f"cannot read the model file {path}: {exc.strerror}") from None
    # Published by digest, not by file name: a name like "alice-finetune.gguf" can be as
    # private as the folder it sits in.
    return ResolvedModel(f"sha256-{digest[:16]}.gguf", path.resolve(), digest, size, "path")


def resolve_model(name: str, models_dir: Path) -> ResolvedModel:
    """A protocol's model name (or a GGUF path given with --target) to a file."""
    if is_gguf_path(name):
        return resolve_path(name)
    return resolve_ollama(models_dir, name)
