"""The engines: what a vLLM server does with a workload's requests, per platform, and the
workloads it is sent. Below both prediction (:mod:`prefixbench.predict`) and the bench
(:mod:`prefixbench.bench`), which import it; it imports only :mod:`prefixbench.measure`
(``tests/static/test_layers.py`` holds the floors).

* The KV-cache managers: :mod:`.cachesim` (vLLM's block cache with eviction, one
  full-attention group), :mod:`.hybridsim` (vLLM's hybrid manager: sliding-window and
  full-attention groups on one pool), :mod:`.cachemodel` (which of the two a model's
  ``config.json`` asks for), :mod:`.kvcapacity` (the capacity to model for a server).
* The schedulers: vLLM's :mod:`.schedsim` (``Scheduler``), :mod:`.schedasync`
  (``AsyncScheduler``), :mod:`.schedhybrid` (either over the hybrid manager), with
  :mod:`.schedpool` (the block pool), :mod:`.schedconfig` (the serving settings) and
  :mod:`.schedclient` (the bench client's timing); the Neuron plugin's
  :mod:`.schedneuron`. :mod:`.platforms` picks the model a platform runs.
* The model's tokenizer, offline: :mod:`.tokenizer`, :mod:`.harmony` (gpt-oss's chat
  format), :mod:`.tokenizer_vocab`; :mod:`.progress` (reading and encoding progress).
* The workloads: :mod:`.workloads` (the workload model), :mod:`.prefix_repetition` (vLLM's
  dataset, regenerated), :mod:`.custom` (your own prompts; reading and checking their file,
  :mod:`.custom_read`; indexing a big one, :mod:`.custom_index`), :mod:`.chat_traffic`
  (multi-turn chat traffic written as such a file).

Flat rather than one folder per platform: the platforms share all but one module. The
Neuron plugin's scheduler is vLLM's with the plugin's rules
(:mod:`.schedneuron` builds on :mod:`.schedsim`'s ``SchedulerSim``)
over the same KV-cache manager, and :mod:`.platforms` is the one place a platform picks
its model.
"""
