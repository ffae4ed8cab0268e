"""The tolerances of ``prefixbench compare``: how much worse than the reference a metric may
be, per metric kind, and the YAML file that overrides them.

A metric regresses when it is worse than the reference by more than
``max(rel x |reference|, abs)``. ``rel`` is a fraction (0.15 is 15%) and must lie in
[0, 1]: a file saying ``rel: 15`` meant 15%, not 1500%, and is refused rather than read as
a gate that nothing can fail. ``abs`` is in the metric's own unit: milliseconds, tokens/s,
percentage points of TTFT reduction (at most 100), or a hit-ratio fraction (at most 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal

from prefixbench.measure.yamlfile import YamlFileError, load_yaml_file

__all__ = ["ABS_BOUNDS", "DEFAULT_TOLERANCES", "DIRECTIONS", "REL_MAX", "Direction",
           "Tolerance", "ToleranceError", "Tolerances", "load_tolerances"]

Direction = Literal["lower", "higher", "both"]

#: Which way is better, per metric kind (the last component of a metric name).
DIRECTIONS: Final[dict[str, Direction]] = {
    "median_ttft_ms": "lower",
    "output_throughput": "higher",
    "ttft_reduction_pct": "higher",
    "hit_ratio": "both",
}

#: The largest relative tolerance: 1 (100%). Relative tolerances are fractions.
REL_MAX: Final = 1.0

#: The largest absolute tolerance of a metric whose unit is bounded (its whole range).
ABS_BOUNDS: Final[dict[str, tuple[float, str]]] = {
    "ttft_reduction_pct": (100.0, "percentage points"),
    "hit_ratio": (1.0, "a fraction: 0.01 is 1 point"),
}


class ToleranceError(ValueError):
    """The tolerance file is malformed; names the file and key."""


@dataclass(frozen=True)
class Tolerance:
    """Allowed worsening: ``max(rel * |reference|, abs)``."""

    rel: float = 0.0
    abs: float = 0.0

    def allowed(self, reference: float) -> float:
        return max(self.rel * abs(reference), self.abs)

    def text(self, reference: float) -> str:
        """How :meth:`allowed` came out, in words: ``max(rel 0.1 x 120, abs 1)``."""
        return f"max(rel {self.rel:g} x {abs(reference):.4g}, abs {self.abs:g})"


#: 10% on TTFT and throughput (the recorded CPU run varied 28% in throughput between two
#: identical single runs, so gate on repetitions), 5 points of TTFT reduction, 1 point of
#: hit ratio (what "matches expected" allows).
DEFAULT_TOLERANCES: Final[Mapping[str, Tolerance]] = {
    "median_ttft_ms": Tolerance(rel=0.10, abs=1.0),
    "output_throughput": Tolerance(rel=0.10),
    "ttft_reduction_pct": Tolerance(abs=5.0),
    "hit_ratio": Tolerance(abs=0.01),
}


@dataclass(frozen=True)
class Tolerances:
    per_metric: Mapping[str, Tolerance] = field(
        default_factory=lambda: dict(DEFAULT_TOLERANCES))
    #: ``fleet``, ``hosts`` or ``both``.
    scope: str = "both"

    def for_metric(self, name: str) -> Tolerance:
        return self.per_metric.get(name.rsplit("/", 1)[-1], Tolerance())

    def to_dict(self) -> dict[str, Any]:
        return {"tolerances": {k: {"rel": v.rel, "abs": v.abs}
                               for k, v in sorted(self.per_metric.items())},
                "scope": self.scope}


def _value(p: Path, name: str, key: str, v: Any) -> float:
    """One ``rel``/``abs`` value, checked against its bound."""
    if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
        raise ToleranceError(f"{p}: {name}.{key} must be a number >= 0, got {v!r}")
    if key == "rel" and v > REL_MAX:
        raise ToleranceError(
            f"{p}: {name}.rel is {v!r}, but relative tolerances are fractions in "
            f"[0, {REL_MAX:g}] (0.15 is 15%): write {v / 100:g} for {v:g}%")
    bound = ABS_BOUNDS.get(name)
    if key == "abs" and bound is not None and v > bound[0]:
        raise ToleranceError(f"{p}: {name}.abs is {v!r}, above its whole range "
                             f"{bound[0]:g} ({bound[1]})")
    return float(v)


def load_tolerances(path: str | Path) -> Tolerances:
    """Defaults overridden by a YAML file::

        tolerances:
          median_ttft_ms: {rel: 0.10, abs: 1.0}
          output_throughput: {rel: 0.10}
          ttft_reduction_pct: {abs: 5.0}
          hit_ratio: {abs: 0.01}
        scope: both          # fleet | hosts | both
    """
    p = Path(path)
    try:
        data = load_yaml_file(p) or {}
    except YamlFileError as exc:
        raise ToleranceError(str(exc)) from None
    if not isinstance(data, Mapping):
        raise ToleranceError(f"{p}: expected a mapping with 'tolerances' and/or 'scope'")
    unknown = set(data) - {"tolerances", "scope"}
    if unknown:
        raise ToleranceError(f"{p}: unknown key(s) {', '.join(sorted(unknown))}")
    per = dict(DEFAULT_TOLERANCES)
    given = data.get("tolerances") or {}
    if not isinstance(given, Mapping):
        raise ToleranceError(f"{p}: tolerances must be a mapping of metric kind to "
                             f"{{rel, abs}}")
    for name, spec in given.items():
        if name not in DIRECTIONS:
            raise ToleranceError(f"{p}: unknown metric {name!r}; known: "
                                 f"{', '.join(sorted(DIRECTIONS))}")
        if not isinstance(spec, Mapping) or set(spec) - {"rel", "abs"}:
            raise ToleranceError(f"{p}: {name} must be a mapping with 'rel' and/or 'abs'")
        values = {k: _value(p, name, k, v) for k, v in spec.items()}
        per[name] = replace(per.get(name, Tolerance()), **values)
    scope = data.get("scope", "both")
    if scope not in ("fleet", "hosts", "both"):
        raise ToleranceError(f"{p}: scope must be fleet, hosts or both, got {scope!r}")
    return Tolerances(per_metric=per, scope=str(scope))
