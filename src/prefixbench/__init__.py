"""prefixbench: the pure-Python core of the prefix-cache benchmark bundle.

Everything that can be decided without a host lives here: settings validation, vLLM
command lines, expected cache-hit ratios, metric parsing, result records, statistics and
reports. This package never imports ansible; the bundle's plugins and scripts are thin
adapters over it.
"""

__version__ = "0.1.0"
