"""Run on a host with the venv's python: parse `vllm serve` argvs with vLLM's own parser.

Takes a JSON list of argvs (one import of vLLM for all of them); prints a JSON list of
what vLLM understood, in order; exits non-zero (argparse) on a flag it refuses.
"""

import json
import sys

from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser


def parse(argv):
    top = FlexibleArgumentParser(prog="vllm")
    ServeSubcommand().subparser_init(top.add_subparsers(dest="subparser"))
    ns = top.parse_args(argv[1:])
    return {
        "model": getattr(ns, "model_tag", None) or ns.model,
        "enable_prefix_caching": ns.enable_prefix_caching,
        "additional_config": ns.additional_config,
        "hf_overrides": ns.hf_overrides,
        "max_num_batched_tokens": ns.max_num_batched_tokens,
        "max_num_seqs": ns.max_num_seqs,
        "max_model_len": ns.max_model_len,
        "tensor_parallel_size": ns.tensor_parallel_size,
        "host": ns.host,
        "port": ns.port,
    }


print(json.dumps([parse(argv) for argv in json.loads(sys.argv[1])], default=str))
