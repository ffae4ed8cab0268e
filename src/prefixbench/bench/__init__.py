"""Workloads and the bench: what one ``vllm bench serve`` run is, and its record.

:mod:`.workloads` (the workload model), :mod:`.prefix_repetition` (vLLM's dataset,
regenerated), :mod:`.custom` (your own prompts; reading and checking their file,
:mod:`.custom_read`; indexing a big one, :mod:`.custom_index`; multi-turn chat traffic
written as such a file, :mod:`.chat_traffic`), :mod:`.seeds` and
:mod:`.experiment` (which benches a host runs, with which seed), :mod:`.bench_argv` (the
exact argv), :mod:`.criteria` (what a workload is for the verdicts), :mod:`.benchrun` (one
bench turned into a record), :mod:`.runmeta` (the run's ``run.json``).
"""
