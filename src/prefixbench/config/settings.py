"""Preflight's validation of the settings of one host, against the catalogue.

The settings themselves are declared once, in :mod:`prefixbench.config.catalogue`. The preflight
play hands the variables it finds for each host to :func:`validate`, which returns the
coerced settings and one line per problem; nothing on any host changes until that list is
empty.

Coercion follows Ansible's own argument-spec rules so that ``-e key=value`` works: an
``int`` accepts ``8`` and ``"8"`` but not ``"eight"``, ``8.5`` or ``true``; a ``bool``
accepts the usual yes/no spellings. Cross-field rules (the tutorial's constraints) are
plain functions in :mod:`prefixbench.config.rules`, registered in the catalogue's :data:`RULES`;
later features add rules there.

This module imports both the catalogue and the rules; the rules import only the
catalogue. The catalogue's names are re-exported here, so ``prefixbench.config.settings.BY_NAME``
and the like keep working for the plugins and the tests.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

# Importing the rules registers the tutorial's cross-field rules in RULES (and the
# model's fit and recipe checks in RULES and WARNINGS, the workloads' in WARNINGS).
from prefixbench.config import (  # noqa: F401
    rules,
    rules_fit,
    rules_plugin,
    rules_s3,
    rules_workload,
)
from prefixbench.config.catalogue import (
    BY_NAME,
    CATALOGUE,
    OWNED_PREFIXES,
    REDACTED,
    RESERVED,
    RULES,
    SECRETS,
    WARNINGS,
    Kind,
    Rule,
    Setting,
    catalogue_default,
    owned_names,
    rule,
)
from prefixbench.hosts import instances

__all__ = [
    "BY_NAME", "CATALOGUE", "OWNED_PREFIXES", "PROFILES_DIR", "REDACTED", "RESERVED", "RULES",
    "SECRETS", "Kind", "Rule", "Setting", "ValidationResult", "available_profiles",
    "catalogue_default", "coerce", "load_profile", "owned_names", "plain", "rule", "validate",
    "warnings_of",
]

# Characters that never belong in a value that ends up on a command line or in a unit
# file: control characters (newlines would split a unit directive) and NUL.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass
class ValidationResult:
    """Coerced settings of one host and the problems found, one line each."""

    host: str
    settings: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    #: What preflight prints without stopping the run, one line each (only when ok).
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


_TRUE: Final = frozenset({"true", "yes", "on", "1", "y", "t"})
_FALSE: Final = frozenset({"false", "no", "off", "0", "n", "f"})


class _Invalid(ValueError):
    """A value that does not have the type its setting says."""


def _type_name(value: Any) -> str:
    return type(value).__name__


def _as_int(value: Any) -> int:
    if isinstance(value, bool):
        raise _Invalid(f"must be an integer, got {value!r} (bool)")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        return int(value.strip())
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise _Invalid(f"must be an integer, got {value!r} ({_type_name(value)})")


def _as_float(value: Any) -> float:
    if isinstance(value, bool):
        raise _Invalid(f"must be a number, got {value!r} (bool)")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise _Invalid(f"must be a number, got {value!r} ({_type_name(value)})")


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise _Invalid(f"must be a boolean (true/false), got {value!r} ({_type_name(value)})")


def _as_str(value: Any) -> str:
    if isinstance(value, str):
        if _CONTROL.search(value):
            raise _Invalid("must not contain control characters (newline, tab, NUL)")
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise _Invalid(f"must be a string, got {value!r} ({_type_name(value)})")


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, list | tuple):
        return list(value)
    raise _Invalid(f"must be a list, got {value!r} ({_type_name(value)})")


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Invalid(f"keys must be strings, got {key!r}")
            out[key] = item
        return out
    raise _Invalid(f"must be a mapping, got {value!r} ({_type_name(value)})")


def _list_of(value: Any, item: Callable[[Any], Any], what: str) -> list[Any]:
    """``value`` as a list of ``item``-coerced values; the reason names ``what``."""
    items = _as_list(value)
    try:
        return [item(v) for v in items]
    except _Invalid as exc:
        raise _Invalid(f"must be a list of {what} ({exc})") from None


def coerce(setting: Setting, value: Any) -> Any:
    """Return ``value`` as the setting's type, or raise ``ValueError`` with the reason."""
    result: Any
    if setting.kind == "int":
        result = _as_int(value)
    elif setting.kind == "float":
        result = _as_float(value)
    elif setting.kind == "bool":
        result = _as_bool(value)
    elif setting.kind == "str":
        result = _as_str(value)
    elif setting.kind == "list_int":
        result = _list_of(value, _as_int, "integers")
    elif setting.kind == "list_float":
        result = _list_of(value, _as_float, "numbers")
    elif setting.kind == "list_str":
        result = [_as_str(v) for v in _as_list(value)]
    elif setting.kind == "dict":
        result = _as_dict(value)
    else:  # list_dict
        result = [_as_dict(v) for v in _as_list(value)]

    _check_bounds(setting, result)
    return result


def _check_bounds(setting: Setting, result: Any) -> None:
    lists = ("list_int", "list_float", "list_str")
    values = result if isinstance(result, list) and setting.kind in lists else [result]
    for item in values:
        if setting.choices is not None and item not in setting.choices:
            allowed = ", ".join(str(c) for c in setting.choices)
            raise _Invalid(f"{item!r} is not one of: {allowed}")
        if setting.minimum is not None and isinstance(item, int | float) \
                and item < setting.minimum:
            raise _Invalid(f"must be >= {setting.minimum:g}, got {item}")
        if setting.maximum is not None and isinstance(item, int | float) \
                and item > setting.maximum:
            raise _Invalid(f"must be <= {setting.maximum:g}, got {item}")
        if setting.pattern is not None and isinstance(item, str) \
                and not re.fullmatch(setting.pattern, item):
            raise _Invalid(f"{item!r} does not match the expected form {setting.pattern}")


PROFILES_DIR: Final = Path(__file__).resolve().parents[1] / "data" / "profiles"


def available_profiles() -> list[str]:
    """Names of the model profiles shipped with the bundle."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yml"))


def load_profile(name: str) -> dict[str, Any]:
    """The settings a model profile sets; ``ValueError`` naming the known ones if unknown."""
    path = PROFILES_DIR / f"{name}.yml"
    if not path.is_file():
        raise ValueError(f"{name!r} is not a known profile (known: "
                         f"{', '.join(available_profiles())})")
    data = yaml.safe_load(path.read_text()) or {}
    unknown = sorted(set(data) - set(BY_NAME))
    if not isinstance(data, dict) or unknown:
        raise ValueError(f"{name!r}: profile sets unknown settings {unknown}")
    return data


def plain(value: Any) -> Any:
    """A copy of ``value`` made of builtin types only.

    Values handed over by a templating engine may be subclasses of ``str``, ``dict`` and
    so on that carry extra data; messages and JSON should only ever see the builtins.
    """
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def _tp_by_family(s: dict[str, Any]) -> Iterable[str]:
    """Set the host's tensor-parallel degree from the per-family map, if it has one.

    Called only when the inventory does not set ``vllm_service_tensor_parallel_size``
    itself (the inventory always wins); yields a line if the host's entry is no valid
    degree. Keys that are no family are a rule's business (rules.by_family_keys).
    """
    name = "vllm_service_tensor_parallel_size_by_family"
    by_family = s.get(name) or {}
    fam = instances.family(str(s.get("prefixbench_instance_type", "")))
    if fam not in by_family:
        return
    tp_setting = BY_NAME["vllm_service_tensor_parallel_size"]
    try:
        s[tp_setting.name] = coerce(tp_setting, plain(by_family[fam]))
    except ValueError as exc:
        yield f"{name}.{fam} {exc}"


def validate(values: Mapping[str, Any], host: str = "all",
             extra_names: Iterable[str] = ()) -> ValidationResult:
    """Validate the variables of one host.

    ``values`` holds the host's variables (only the catalogued ones are read);
    ``extra_names`` are the names of every variable visible to the host, so that
    misspelt names with an owned prefix are reported rather than silently ignored.
    Every problem is one line that starts with the host and the variable's name.
    """
    result = ValidationResult(host=host)
    inventory = values
    profile_name = values.get("prefixbench_model_profile") or ""
    if profile_name:
        try:
            values = {**load_profile(str(profile_name)), **values}
        except ValueError as exc:
            result.problems.append(f"{host}: prefixbench_model_profile {exc}")
            return result
    for setting in CATALOGUE:
        if setting.name in values and values[setting.name] is not None:
            try:
                result.settings[setting.name] = coerce(setting, plain(values[setting.name]))
            except ValueError as exc:
                result.problems.append(f"{host}: {setting.name} {exc}")
        elif setting.required:
            result.problems.append(
                f"{host}: {setting.name} is required ({setting.description}) "
                "- set it in the inventory's group_vars or host_vars")
        else:
            result.settings[setting.name] = setting.default

    if result.ok and inventory.get("vllm_service_tensor_parallel_size") is None:
        result.problems.extend(f"{host}: {line}" for line in _tp_by_family(result.settings))

    for name in owned_names(extra_names):
        if name not in BY_NAME:
            close = difflib.get_close_matches(name, BY_NAME.keys(), n=1)
            hint = f" - did you mean {close[0]}?" if close else ""
            result.problems.append(f"{host}: {name} is not a setting of this bundle{hint}")

    if result.ok:
        for check in RULES:
            result.problems.extend(f"{host}: {line}" for line in check(result.settings))
    if result.ok:
        result.warnings.extend(f"{host}: {line}" for line in warnings_of(result.settings))
    return result


def warnings_of(settings: Mapping[str, Any]) -> list[str]:
    """The registered warnings (:data:`WARNINGS`) about valid settings, one line each."""
    return [line for check in WARNINGS for line in check(settings)]
