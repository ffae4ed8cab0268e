"""The report's first screen: where the numbers come from, and the bottom line.

A reader who sees only the top of the report must know whether these are Trainium
figures or the simulated fleet's, on which model and versions, and what to conclude
with how much confidence, including what was not measured.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Final

from prefixbench.hosts.fingerprint import REAL_DRIVER_FILE, Fingerprint
from prefixbench.report.model import HostSummary, Summary, Verdict
from prefixbench.report.vocab import FAIL, INCONCLUSIVE, NOT_RUN, PASS

__all__ = ["bottom_line", "instance_type_problems", "provenance", "simulated",
           "unchecksummed"]


NOT_OBSERVED: Final = "not observed"


def _counted(values: Sequence[str | None]) -> str:
    seen = Counter(v for v in values if v)
    shown = ", ".join(f"{n} x {v}" if n > 1 else v for v, n in sorted(seen.items()))
    return _with_gaps(shown, sum(1 for v in values if not v))


def _distinct(values: Sequence[str | None]) -> str:
    shown = " / ".join(sorted({v for v in values if v}))
    return _with_gaps(shown, sum(1 for v in values if not v))


def _with_gaps(shown: str, gaps: int) -> str:
    if not shown:
        return NOT_OBSERVED
    return f"{shown} ({NOT_OBSERVED} on {gaps} host(s))" if gaps else shown


def simulated(s: Summary) -> bool:
    """Whether any host of the run is a simulated one (vLLM's CPU build)."""
    return any(h.fingerprint is not None and h.fingerprint.platform == "cpu" for h in s.hosts)


def _on_neuron(fps: Sequence[Fingerprint | None]) -> bool:
    """Every host left a fingerprint of platform neuron with the Neuron driver's version
    read from the driver itself (not the simulated hosts' marker file): only then may the
    report say where it measured."""
    return bool(fps) and all(fp is not None and fp.platform == "neuron" and fp.real_driver()
                             for fp in fps)


def _sourced(fp: Fingerprint | None, key: str) -> str | None:
    """A value the host reported, with where it came from; None when it reported none."""
    if fp is None:
        return None
    value = getattr(fp, key)
    if value is None or value == "":
        return None
    source = fp.source(key)
    return f"{value} ({source})" if source else f"{value} (source not recorded)"


def instance_type_problems(s: Summary) -> list[str]:
    """One line per host whose own instance type differs from the inventory's."""
    out = []
    for h in s.hosts:
        fp = h.fingerprint
        if (fp is not None and fp.observed_instance_type and fp.instance_type
                and fp.observed_instance_type != fp.instance_type):
            out.append(f"**Problem: {h.host} reports instance type "
                       f"{fp.observed_instance_type} ({fp.source('observed_instance_type')}), "
                       f"the inventory says {fp.instance_type}**: its figures are not those "
                       f"of the instance type the inventory names.")
    return out


def provenance(s: Summary) -> str:
    """One paragraph: simulated or real, instance types, model, versions, repetitions;
    every figure from a host's fingerprint (what the host reported), else "not observed"."""
    fps = [h.fingerprint for h in s.hosts]
    missing = [h.host for h in s.hosts if h.fingerprint is None]
    models = [None if fp is None else f"{fp.model.get('repo_id') or fp.model.get('source') or '?'}"
              f"@{(fp.model.get('revision') or '?')[:12]}" for fp in fps]
    reps = s.run.get("repetitions")
    if simulated(s):
        head = ("**SIMULATED fleet: not Trainium data.** vLLM's CPU build serving a tiny "
                "model on simulated hosts (platform cpu); the figures show the method, not "
                "Neuron performance.")
    elif _on_neuron(fps):
        head = (f"**Measured on Neuron** (Neuron driver "
                f"{_distinct([fp.neuron_driver for fp in fps if fp is not None])} read "
                f"from {REAL_DRIVER_FILE} on every host).")
    else:
        why = (f"no fingerprint from {', '.join(missing)}" if missing else
               "not every host reported platform neuron and a Neuron driver version read "
               f"from {REAL_DRIVER_FILE}")
        head = (f"**Platform {NOT_OBSERVED}** ({why}): nothing here shows on which "
                f"hardware these figures were measured.")
    runtime = [None if fp is None else fp.neuron_packages.get("aws-neuronx-runtime-lib")
               for fp in fps]
    return (f"{head} Hosts: {len(s.hosts)} (instance type as the inventory set it: "
            f"{_counted([None if fp is None else fp.instance_type for fp in fps])}; "
            f"as the hosts reported it: "
            f"{_counted([_sourced(fp, 'observed_instance_type') for fp in fps])}). "
            f"Neuron devices "
            f"{_counted([_sourced(fp, 'neuron_devices') for fp in fps])}, NeuronCores "
            f"{_counted([_sourced(fp, 'neuron_cores') for fp in fps])}. "
            f"Model: {_distinct(models)}. Neuron driver "
            f"{_distinct([_sourced(fp, 'neuron_driver') for fp in fps])}, "
            f"runtime {_distinct(runtime)} (release pinned "
            f"{_distinct([None if fp is None else fp.neuron_release for fp in fps])}), vLLM "
            f"{_distinct([None if fp is None else fp.vllm_version for fp in fps])}, "
            f"vllm-neuron "
            f"{_distinct([None if fp is None else fp.vllm_neuron_version for fp in fps])}. "
            f"Repetitions: {reps if reps else 'unknown'}.{_read_releases(fps)}")


def _read_releases(fps: Sequence[Fingerprint | None]) -> str:
    """`` h1: Neuron read from the host, ...; could not check: ...`` for each host whose
    release was read from the host (``sources.neuron_release``); "" when none was."""
    return "".join(f" {fp.host}: {fp.source('neuron_release')}." for fp in fps
                   if fp is not None and fp.source("neuron_release"))


def unchecksummed(s: Summary) -> str:
    """The warning for results used without a checksum (``--accept-unchecksummed``)."""
    n = len(s.unchecksummed)
    shown = ", ".join(f"`{p}`" for p in s.unchecksummed[:5])
    more = f" and {n - 5} more" if n > 5 else ""
    return (f"**Warning: {n} result(s) without a checksum are used** "
            f"(--accept-unchecksummed, for a run of an older version): nothing shows that "
            f"their figures are the ones measured. {shown}{more}.")


def _verdicts(hosts: Sequence[HostSummary], name: str) -> list[Verdict]:
    return [v for h in hosts for v in h.verdicts if v.name == name]


def _pct_range(values: Sequence[float], *, signed: bool = False) -> str:
    lo, hi = min(values), max(values)
    fmt = "+.1f" if signed else ".1f"
    return f"{lo:{fmt}}%" if abs(hi - lo) < 0.05 else f"{lo:{fmt}}% to {hi:{fmt}}%"


def _cost_sentence(s: Summary) -> list[str]:
    from prefixbench.report.economics import cost_per_million  # noqa: PLC0415
    from prefixbench.report.vocab import BASELINE, CACHED, HIGH_OVERLAP  # noqa: PLC0415

    pairs = []
    for h in s.hosts:
        price = h.time.price_per_hour if h.time else None
        b, c = h.role(BASELINE, HIGH_OVERLAP), h.role(CACHED, HIGH_OVERLAP)
        cb = cost_per_million(price, b.output_throughput.median
                              if b and b.output_throughput else None)
        cc = cost_per_million(price, c.output_throughput.median
                              if c and c.output_throughput else None)
        if cb is not None and cc is not None:
            pairs.append((cb, cc))
    if not pairs:
        return []
    from prefixbench.measure.stats import median  # noqa: PLC0415

    return [f"A million output tokens of that workload cost {median([p[0] for p in pairs]):.2f}"
            f" without caching and {median([p[1] for p in pairs]):.2f} with it (median of "
            f"{len(pairs)} host(s), at the prices given per instance-hour)."]


def bottom_line(s: Summary) -> str:
    """What to conclude, how sure, and what was not measured, in one paragraph."""
    if not s.hosts:
        return "No host has results yet."
    parts: list[str] = []
    high = [v for v in _verdicts(s.hosts, "high_overlap_ttft_lower")
            if v.status != NOT_RUN and isinstance(v.numbers.get("ratio"), float)]
    if high:
        cuts = [(1 - float(v.numbers["ratio"] or 0)) * 100 for v in high]
        lows = [(1 - float(v.numbers["ratio_high"] or 0)) * 100 for v in high]
        highs = [(1 - float(v.numbers["ratio_low"] or 0)) * 100 for v in high]
        workload = high[0].numbers.get("workload")
        parts.append(
            f"With prefix caching, median TTFT on the high-overlap workload ({workload}) "
            f"was {_pct_range(cuts)} lower across {len(high)} host(s) (95% intervals "
            f"{min(lows):.1f}% to {max(highs):.1f}%).")
    no = [v for v in _verdicts(s.hosts, "no_overlap_no_regression")
          if isinstance(v.numbers.get("ratio"), float)]
    if no:
        diffs = [(float(v.numbers["ratio"] or 0) - 1) * 100 for v in no]
        parts.append(f"On prompts sharing nothing it was {_pct_range(diffs, signed=True)} "
                     "(positive: slower with caching).")
    parts += _cost_sentence(s)
    statuses = Counter(v.status for h in s.hosts for v in h.verdicts)
    parts.append("Verdicts: " + ", ".join(f"{statuses[k]} {k}" for k in
                                         (PASS, FAIL, INCONCLUSIVE, NOT_RUN) if statuses[k])
                 + ".")
    if s.status == PASS:
        parts.append("Every judged criterion passed with its interval clear of the threshold.")
    elif s.status == FAIL:
        failed = sorted({f"{h}: {v.name}" for h, v in s.failed_verdicts})
        parts.append(f"Failed: {', '.join(failed)}; read those verdicts before acting.")
    elif s.status == INCONCLUSIVE:
        parts.append("Some criteria are not decided by this run: their verdicts say how "
                     "many repetitions would decide them.")
    gaps = []
    not_run = sorted({v.name for h in s.hosts for v in h.verdicts if v.status == NOT_RUN})
    if not_run:
        gaps.append(f"criteria without a workload ({', '.join(not_run)})")
    if s.failures:
        gaps.append(f"{len(s.failures)} bench(es) without a result (see Failures)")
    if (s.run.get("repetitions") or 1) == 1:
        gaps.append("run-to-run noise (one repetition)")
    if simulated(s):
        gaps.append("Neuron performance (simulated fleet)")
    elif not _on_neuron([h.fingerprint for h in s.hosts]):
        gaps.append("the hardware these figures come from (platform not observed)")
    if gaps:
        parts.append("Not measured: " + "; ".join(gaps) + ".")
    return " ".join(parts)
