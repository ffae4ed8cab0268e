"""What teardown removes of the server's own files on a host (the vllm_service role's
``tasks_from: teardown``): declared here beside the constants that put them there, and
read without the host's Neuron release (teardown does not read it: a host on any
release, or on none the bundle knows, is torn down the same way)."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from prefixbench.hosts.provision import removable
from prefixbench.servers.sandbox import PROOF_FILE
from prefixbench.servers.server import (
    BENCH_CLIENT_SCRIPT,
    DEFAULT_CACHE_ROOT,
    ENV_FILE,
    STATE_DIR,
)


def paths(settings: Mapping[str, Any]) -> list[str]:
    """The files and directories teardown removes, each once, in order: the service's
    state, its cache (vLLM's compile cache, ``vllm_service_cache_root``), the doctor's
    proof of the sandbox (:data:`prefixbench.servers.sandbox.PROOF_FILE`: a strict
    deploy would trust it on the next run otherwise) and the preloaded bench client's
    directory, which holds it, and the root-only environment file's directory."""
    cache_root = str(settings.get("vllm_service_cache_root") or DEFAULT_CACHE_ROOT)
    out = [STATE_DIR, cache_root, PROOF_FILE, posixpath.dirname(BENCH_CLIENT_SCRIPT),
           posixpath.dirname(ENV_FILE)]
    # Never a system directory (a cache root set to /var/cache stays).
    return [p for p in dict.fromkeys(posixpath.normpath(p) for p in out) if removable(p)]
