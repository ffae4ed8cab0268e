"""Prediction: the prefix cache replayed without a server, through the engine models of
:mod:`prefixbench.engines`.

:mod:`.replay` and :mod:`.whatif` (a workload or your prompts through it), :mod:`.served`
(the expectation from the tokens the server really gets), :mod:`.capacity_curve` (hit ratio
against KV capacity), :mod:`.chat_estimate` (the hit ratio a chat traffic's structure
implies), :mod:`.arrivals` (when requests reach the engine).
"""
