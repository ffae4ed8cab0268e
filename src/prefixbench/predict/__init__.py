"""Prediction: the prefix cache replayed without a server.

:mod:`.cachesim` (vLLM's block cache with eviction), :mod:`.kvcapacity` (the KV capacity
to model for a server), :mod:`.replay` and :mod:`.whatif`
(a workload or your prompts through it), :mod:`.served` (the expectation from the tokens
the server really gets), :mod:`.capacity_curve` (hit ratio against KV capacity),
:mod:`.chat_estimate` (the hit ratio a chat traffic's structure implies),
:mod:`.tokenizer` and :mod:`.tokenizer_vocab` (the model's tokenizer, offline).
"""
