"""Whether AWS publishes a command for a host's model, instance family and TP.

The published configurations are data (``data/aws_recipes.yml``, each with the file of
aws-neuron/aws-neuron-sdk it comes from). A Neuron host whose (model, family, TP), and
dtype where the profile states one, is none of them gets a preflight warning, not a
refusal: the configuration may well work, but nobody has shown it compiles and serves,
so it should run on one host first (``--limit``) before the fleet pays for it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from prefixbench.hosts.instances import family

RECIPES_FILE: Final = Path(__file__).resolve().parent.parent / "data" / "aws_recipes.yml"


@dataclass(frozen=True)
class Recipe:
    """One published configuration."""

    model: str
    family: str
    dtype: str
    tp: int
    #: The file of the source repository that gives it.
    where: str


@dataclass(frozen=True)
class Recipes:
    """The published configurations and the documented gaps, from one source tag."""

    source: str
    recipes: tuple[Recipe, ...]
    #: (model, family) -> why AWS's text does not amount to a recipe there.
    gaps: Mapping[tuple[str, str], str]


@functools.cache
def load(path: Path = RECIPES_FILE) -> Recipes:
    """The recipes file, parsed (ValueError when an entry lacks a field)."""
    data = yaml.safe_load(path.read_text())
    try:
        recipes = tuple(Recipe(model=str(r["model"]).lower(), family=str(r["family"]),
                               dtype=str(r["dtype"]).lower(), tp=int(r["tp"]),
                               where=str(r["where"]))
                        for r in data["recipes"])
        gaps = {(str(g["model"]).lower(), str(g["family"])): " ".join(str(g["note"]).split())
                for g in data.get("gaps") or []}
        return Recipes(source=str(data["source"]), recipes=recipes, gaps=gaps)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: every recipe needs model, family, dtype, tp and where, "
                         f"every gap model, family and note ({exc})") from None


def model_name(s: Mapping[str, Any]) -> str:
    """The model's short name: the served name's or the model path's last component."""
    name = str(s.get("vllm_service_served_model_name") or s.get("vllm_service_model") or "")
    return name.rstrip("/").rsplit("/", 1)[-1].lower()


def matching(s: Mapping[str, Any], recipes: Recipes | None = None) -> Recipe | None:
    """The published configuration this host runs, or None."""
    book = recipes or load()
    model, fam = model_name(s), family(str(s.get("prefixbench_instance_type", "")))
    tp = s.get("vllm_service_tensor_parallel_size")
    dtype = str((s.get("prefixbench_model_dtype_by_family") or {}).get(fam, "")).lower()
    return next((r for r in book.recipes if r.model == model and r.family == fam
                 and r.tp == tp and (not dtype or r.dtype == dtype)), None)


def recipe_warning(s: Mapping[str, Any], recipes: Recipes | None = None) -> str | None:
    """Preflight's warning for a Neuron host with no published recipe; None otherwise."""
    if s.get("prefixbench_platform") != "neuron":
        return None
    book = recipes or load()
    if matching(s, book) is not None:
        return None
    model, fam = model_name(s), family(str(s.get("prefixbench_instance_type", "")))
    tp = s.get("vllm_service_tensor_parallel_size")
    dtype = str((s.get("prefixbench_model_dtype_by_family") or {}).get(fam, "")).lower()
    what = f"{model or 'this model'}{f' in {dtype.upper()}' if dtype else ''} on {fam} at TP {tp}"
    published = [r for r in book.recipes if r.model == model]
    if published:
        why = "AWS publishes " + "; ".join(f"TP {r.tp} on {r.family} in {r.dtype.upper()} "
                                           f"({r.where})" for r in published)
    else:
        why = "no AWS recipe for this model at all"
    gap = book.gaps.get((model, fam))
    if gap:
        why += f"; on {fam}: {gap}"
    here = [r for r in book.recipes if r.family == fam and r.model != model]
    if here:
        why += f"; on {fam} AWS publishes " + "; ".join(
            f"{r.model} at TP {r.tp} in {r.dtype.upper()} ({r.where}{_profile_hint(r.model)})"
            for r in here)
    return (f"no AWS recipe for {what} (read at {book.source}: {why}): run it on one host "
            "first (--limit) before the fleet")


PROFILES_DIR: Final = RECIPES_FILE.parent / "profiles"


def _profile_hint(model: str) -> str:
    """How to switch to ``model``, where the bundle has its profile."""
    return (f"; prefixbench_model_profile: {model}"
            if (PROFILES_DIR / f"{model}.yml").is_file() else "")
