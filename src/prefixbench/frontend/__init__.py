"""Front end: the ``prefixbench`` command.

:mod:`.cli` (``run``, ``report``, ``compare``, ``whatif``, ``sim``), :mod:`.runview` (the
live per-host view of a run under ansible-runner), :mod:`.progress` (progress lines).
"""
