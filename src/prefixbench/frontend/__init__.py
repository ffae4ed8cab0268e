"""Front end: the ``prefixbench`` command.

:mod:`.cli` (the arguments of ``run``, ``report``, ``compare``, ``whatif``, ``sim``, and
which one runs), :mod:`.cli_run` (``run``), :mod:`.cli_whatif` (``whatif``),
:mod:`.cli_chat` (``chat-traffic``),
:mod:`.cli_shared` (what they share), :mod:`.runview` (the live per-host view of a run
under ansible-runner), :mod:`.progress` (progress lines).
"""
