"""Performance tools of the bundle itself (benchmarks that print figures, not tests).

:mod:`.overhead` and :mod:`.overhead_cli` (the bundle's cost against the bare commands).
"""
