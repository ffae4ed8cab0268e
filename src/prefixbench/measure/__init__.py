"""Measurement: metric deltas, hit ratios, the bench JSON, records, the run directory.

:mod:`.metrics` (Prometheus deltas), :mod:`.ratios` (expected and measured hit ratios),
:mod:`.bench_json` (``vllm bench serve`` results, validated), :mod:`.records` (a
result or a failure, one header, checksummed), :mod:`.layout` (the run directory: its
one owner), :mod:`.atomic` (atomic writes), :mod:`.stats` (medians, intervals, tests).
"""
