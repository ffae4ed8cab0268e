#!/usr/bin/python
"""Documentation of the prefixbench_bench action (the work is done by the action plugin
plugins/action/prefixbench_bench.py on the controller; `ansible-doc prefixbench_bench`
reads this file)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: prefixbench_bench
short_description: Run one workload of the tutorial with vllm bench serve and keep the result
description:
  - On the target, snapshots the server's C(/metrics), runs C(vllm bench serve) for one
    workload (an argv, never a shell string, with C(--save-result)), and snapshots
    C(/metrics) again.
  - On the controller, writes the result atomically to
    C(<run_dir>/<host>/<configuration>/<workload>/rep<k>.json) with its metadata, the
    deltas of both step-9 signals (summed over engines), the expected hit ratio from the
    workload and the server's own block size, and the measured ratios.
  - A bench that fails (non-zero exit, timeout, server restarted during it) writes a
    C(rep<k>.failed.json) marker with the reason, stderr and the unit's journal tail,
    and returns C(status=failed) without failing the task, so the other workloads and
    hosts go on.
  - A bench whose result already exists in the run directory is not run again (resume).
  - In check mode nothing runs; the result says what would run.
  - A custom workload (C(dataset_name=custom)) is prepared on the controller first; its
    C(dataset_path) JSONL (prompt or chat-messages lines; chats rendered with the chat
    template of C(<run_dir>/tokenizer/)) becomes C(<run_dir>/prompts/<workload>.jsonl),
    written atomically, copied into the bench's temp dir on the host and run with
    C(--dataset-name custom --dataset-path <file> --custom-output-len N
    --skip-chat-template --no-oversample). The record keeps the file's sha256 and prompt
    count (C(prompts)); its expected ratio is the what-if analyzer's prediction when
    C(<run_dir>/tokenizer/tokenizer.json) exists.
options:
  run_dir:
    description: The run directory on the controller (results/<run_id>).
    type: path
    required: true
  configuration:
    description: Server configuration under test.
    type: str
    required: true
    choices: [baseline, cached]
  workload:
    description: >-
      Name of the workload, one of the host's settings (prefixbench_workloads, or the
      tutorial's three). Its parameters and seed come from I(settings), so the workload
      is defined in one place.
    type: str
    required: true
  repetition:
    description: Repetition number, from 1.
    type: int
    default: 1
  settings:
    description: >-
      The host's validated settings (prefixbench_settings, from the preflight): the
      workload's parameters and seed, the server's address (vllm_service_host,
      vllm_service_port), the model and its served name, the bench timeout
      (prefixbench_bench_timeout), and whether the servers require an API key
      (vllm_service_api_key set: the bench reads the key on the host from the units'
      root-only environment file and sends it as OPENAI_API_KEY; the key is never an
      argument of this task, and the settings hold only a placeholder).
    type: dict
    required: true
  vllm_executable:
    description: The vllm executable on the host.
    type: str
    required: true
  not_started:
    description: >-
      Why the server of this configuration did not start; when set, the bench is not run
      and a failure marker with the unit's journal tail says why.
    type: str
    default: ""
author: prefixbench
"""

EXAMPLES = r"""
- name: Bench the cached server with the tutorial's high-overlap workload
  prefixbench_bench:
    run_dir: results/20261129T090000Z
    configuration: cached
    workload: high_overlap
    repetition: 1
    settings: "{{ prefixbench_settings }}"
    vllm_executable: /opt/vllm-prefixbench/venv/bin/vllm
"""

RETURN = r"""
status:
  description: >-
    done (ran now), skipped (result already in the run directory), failed, or planned
    (check mode).
  type: str
  returned: always
path:
  description: The result (or failure marker) file on the controller.
  type: str
  returned: when status is not planned
summary:
  description: >-
    median_ttft_ms, p99_ttft_ms, output_throughput, expected_ratio, hit_ratio_queries,
    hit_ratio_by_source.
  type: dict
  returned: when status is done or skipped
argv:
  description: The vllm bench serve command that ran (or would run).
  type: list
  elements: str
  returned: always
"""
