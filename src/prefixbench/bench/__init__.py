"""The bench: what one ``vllm bench serve`` run is, and its record. The workloads it runs
are :mod:`prefixbench.engines`' (:mod:`~prefixbench.engines.workloads`,
:mod:`~prefixbench.engines.custom`, ...).

:mod:`.seeds` and :mod:`.experiment` (which benches a host runs, with which seed),
:mod:`.bench_argv` (the exact argv), :mod:`.prepared` (your prompts' prepared file in the
run directory), :mod:`.criteria` (what a workload is for the verdicts), :mod:`.benchrun`
(one bench turned into a record), :mod:`.runmeta` (the run's ``run.json``).
"""
