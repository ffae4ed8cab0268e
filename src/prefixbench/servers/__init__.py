"""Servers: the tutorial's two ``vllm serve`` configurations as data.

:mod:`.server` (argv, environment and sandboxing of each unit), :mod:`.health` (when a
server is up), :mod:`.sweep` (the segment-size sweep's server pairs),
:mod:`.compile_cache` (the key of a server's compiled graphs, shared across the fleet).
"""
