"""Measurement: metric deltas, hit ratios, records, the run directory, statistics.

:mod:`.metrics` (Prometheus deltas), :mod:`.ratios` (expected and measured hit ratios),
:mod:`.results` (the records and the run directory's layout: its one owner),
:mod:`.runmeta` (run.json), :mod:`.atomic` (atomic writes), :mod:`.stats`.
"""
