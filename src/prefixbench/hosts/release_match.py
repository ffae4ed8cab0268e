"""Which Neuron release a host is on, read from what it has installed.

A host's Neuron debs (dpkg's versions, compared by their upstream part) and the vLLM
virtualenvs of AWS's DLAMIs found on it (their ``vllm-neuron`` version, the public part;
the plugin pins the vLLM it is built on, and the simulated fleet's DLAMI venvs hold the
CPU build of vLLM beside a stand-in plugin) are matched against every release manifest
the bundle knows (``hosts.releases``):

* a host whose installed Neuron debs all have one release's versions (missing ones are
  installed at that release's pins) is on that release, and is used as it is; where that
  release's manifest leaves facts unknown, they are read from the host (``host_read``);
* a host whose debs are all at or above the oldest known release's but match none (a
  release newer than any this bundle knows) is read from the host and used as it is,
  with the vLLM Neuron venv found on it (``host_read``);
* a bare host (no Neuron deb) gets ``prefixbench_neuron_release``, or with ``auto`` the
  newest release whose every fact is published (``releases.installable``);
* a host older than the oldest known release, or mixing known releases' versions, or
  without a vLLM Neuron venv where one must be read, is refused in one line.

Naming a release other than the host's moves packages only up, and only with
``neuron_sdk_allow_upgrade``; a Neuron package is never moved down. Pure: the tasks hand
in the facts they read (``roles/neuron_sdk/tasks/release.yml``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from prefixbench.hosts import host_read
from prefixbench.hosts.host_read import HostFacts, Venv
from prefixbench.hosts.releases import (
    AUTO,
    HOST_RELEASE_KEY,
    Release,
    installable,
    load_all,
    load_release,
    newest,
    parse_release,
    upstream_version,
    version_tuple,
)
from prefixbench.hosts.releases import segment_refusal as releases_segment_refusal


def _public(version: str | None) -> str:
    return (version or "").strip().split("+", 1)[0]


__all__ = ["HostFacts", "HostRelease", "Venv", "resolve"]


@dataclass(frozen=True)
class HostRelease:
    """What the bundle does with one host's Neuron release."""

    release: Release | None
    #: "matched" (read from the host), "bare" (nothing installed), "named" (the setting).
    how: str
    #: The DLAMI venv to adopt ("" when none holds the release's vLLM and plugin).
    venv: str = ""
    #: One line saying why the host is refused ("" when it is not).
    refusal: str = ""
    #: One line for the log: the release and how it was found.
    note: str = ""
    #: The release read from the host, manifest-shaped (``host_read.build``); empty when
    #: a complete manifest describes the host.
    read: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"release": self.release.release if self.release else "",
                "how": self.how, "venv": self.venv, "refusal": self.refusal,
                "note": self.note, "read": dict(self.read),
                "unchecked": host_read.unchecked(self.release.provenance)
                if self.release is not None and self.release.provenance else []}


def neuron_packages(installed: Mapping[str, str], rels: Sequence[Release]) -> dict[str, str]:
    """The installed debs any known release pins, ``{name: upstream version}``."""
    names = {n for r in rels for n in r.known_apt()}
    return {n: upstream_version(v) for n, v in installed.items() if n in names}


def venvs_from_probe(results: Sequence[Mapping[str, Any]]) -> list[Venv]:
    """The DLAMI venvs a probe found: each result has ``item`` (the path), ``rc`` and
    ``stdout`` (``vllm <version>`` / ``vllm-neuron <version>`` lines; ``-`` when a
    distribution is not installed). A venv whose interpreter did not run is absent."""
    out = []
    for result in results:
        if result.get("rc") != 0:
            continue
        found: dict[str, str | None] = {}
        for line in str(result.get("stdout", "")).splitlines():
            name, _, version = line.strip().partition(" ")
            found[name] = None if version in ("", "-") else version
        out.append(Venv(str(result.get("item", "")), found.get("vllm"),
                        found.get("vllm-neuron")))
    return out


def differences(rel: Release, packages: Mapping[str, str], venvs: Sequence[Venv]
                ) -> list[str]:
    """What on the host disagrees with ``rel``: installed debs at other versions, and the
    release's own DLAMI venv holding another plugin (compared by its public version: the
    plugin pins its vLLM). Debs not installed are not a difference (installing them moves
    nothing)."""
    out = [f"{name} {packages[name]} (wants {wanted})"
           for name, wanted in rel.known_apt().items()
           if name in packages and packages[name] != wanted]
    own = rel.dlami.get("venv")
    for venv in venvs:
        if venv.path != own:
            continue
        wanted = rel.pip_packages.get("vllm-neuron")
        if _public(venv.plugin) != _public(wanted):
            out.append(f"{venv.path} vllm-neuron {venv.plugin or 'missing'} "
                       f"(wants {wanted})")
    return out


def adoptable_venv(rel: Release, venvs: Sequence[Venv]) -> str:
    """The DLAMI venv holding ``rel``'s vLLM and plugin (its own DLAMI's first), or ""."""
    def fits(v: Venv) -> bool:
        return (v.plugin is not None
                and _public(v.plugin) == _public(rel.pip_packages.get("vllm-neuron")))
    ordered = sorted(venvs, key=lambda v: v.path != rel.dlami.get("venv"))
    return next((v.path for v in ordered if fits(v)), "")


def candidates(packages: Mapping[str, str], venvs: Sequence[Venv],
               rels: Sequence[Release]) -> list[Release]:
    """The releases the host's debs and DLAMI venvs agree with, best first: one whose own
    DLAMI venv is there, then one without a DLAMI, then one whose DLAMI venv is missing;
    the newest first within each. A release whose versions of the installed debs are all
    unknown is none of them."""
    paths = {v.path for v in venvs}

    def rank(rel: Release) -> tuple[int, tuple[tuple[int, ...], str]]:
        own = rel.dlami.get("venv")
        return (2 if own in paths else 1 if not own else 0, rel.order)
    fits = [r for r in rels if set(r.known_apt()) & set(packages)
            and not differences(r, packages, venvs)]
    return sorted(fits, key=rank, reverse=True)


def nearest(packages: Mapping[str, str], venvs: Sequence[Venv],
            rels: Sequence[Release]) -> tuple[Release, list[str]]:
    """The release with the fewest differences (the newest of a tie), and those."""
    newest_first = sorted(rels, key=lambda r: r.order, reverse=True)
    best = min(newest_first, key=lambda r: len(differences(r, packages, venvs)))
    return best, differences(best, packages, venvs)


def downgrades(rel: Release, packages: Mapping[str, str]) -> list[str]:
    """Installed debs ``rel`` pins at a lower version: ``name A -> B``."""
    return [f"{name} {packages[name]} -> {wanted}"
            for name, wanted in rel.known_apt().items()
            if name in packages and version_tuple(wanted) < version_tuple(packages[name])]


def resolve(host: str, requested: str, installed: Mapping[str, str],
            venvs: Sequence[Venv], *, allow_upgrade: bool,
            rels: Sequence[Release] | None = None,
            facts: HostFacts | None = None) -> HostRelease:
    """The release ``host`` runs, or the one line that refuses it.

    ``requested`` is ``prefixbench_neuron_release`` (``auto``, an id or a series);
    ``installed`` is ``{deb: dpkg version}`` (any packages; the Neuron ones are picked);
    ``facts`` what else the probe read (its venvs are ``venvs``).
    """
    rels = list(rels if rels is not None else load_all())
    facts = facts if facts is not None else HostFacts(tuple(venvs))
    packages = neuron_packages(installed, rels)
    named = None if requested == AUTO else _named(requested, rels)
    if not packages:
        return _bare(host, named, rels, venvs)
    older = below_floor(packages, rels)
    if older:
        return HostRelease(None, "matched", refusal=(
            f"{host}: its Neuron packages are older than {_oldest(rels)}, the oldest "
            f"release this bundle runs ({'; '.join(older)}): use a host from an image of "
            f"Neuron {_oldest(rels)} or later, or a bare Ubuntu host (the bundle installs "
            "Neuron there); nothing was changed"))
    fits = candidates(packages, venvs, rels)
    if named is None:
        if fits and not fits[0].unknown():
            rel = fits[0]
            return HostRelease(rel, "matched", adoptable_venv(rel, venvs),
                               note=f"{host}: on Neuron {rel.label()}, read from its "
                                    "packages; used as it is")
        mixed = mixed_releases(packages, rels)
        if not fits and mixed:
            return HostRelease(None, "matched", refusal=(
                f"{host}: its Neuron packages mix releases ({'; '.join(mixed)}): bring "
                "every Neuron package to one release (AWS's Neuron setup guide), or use a "
                "host from one AWS image; nothing was changed"))
        return _read(host, packages, venvs, facts=facts, rels=rels,
                     base=fits[0] if fits else None)
    if named in fits:
        return HostRelease(named, "named", adoptable_venv(named, venvs),
                           note=f"{host}: on Neuron {named.label()}, as named")
    down = downgrades(named, packages)
    here = fits[0].release if fits else "a release this bundle does not know"
    if down:
        return HostRelease(None, "named", refusal=(
            f"{host}: prefixbench_neuron_release {named.release} would move Neuron "
            f"packages down ({'; '.join(down)}); the host is on {here}, and the bundle "
            "never moves a Neuron package down: set prefixbench_neuron_release: auto to "
            "use the host as it is, or use a fresh host; nothing was changed"))
    moves = differences(named, packages, venvs)
    if not allow_upgrade:
        return HostRelease(None, "named", refusal=(
            f"{host}: is on {here}; prefixbench_neuron_release {named.release} would "
            f"change {'; '.join(moves)}; set neuron_sdk_allow_upgrade: true to move "
            "them up, or prefixbench_neuron_release: auto to use the host as it is; "
            "nothing was changed"))
    return HostRelease(named, "named", adoptable_venv(named, venvs),
                       note=f"{host}: moving up from {here} to Neuron {named.label()}: "
                            f"{'; '.join(moves)}")


def _oldest(rels: Sequence[Release]) -> str:
    return min(rels, key=lambda r: r.order).version


def below_floor(packages: Mapping[str, str], rels: Sequence[Release]) -> list[str]:
    """Installed debs below every known release's version of them: ``name A (oldest
    known B)``."""
    out = []
    for name, version in packages.items():
        known = [version_tuple(v) for r in rels for n, v in r.known_apt().items()
                 if n == name]
        if known and version_tuple(version) < min(known):
            floor = ".".join(str(p) for p in min(known))
            out.append(f"{name} {version} (oldest known {floor})")
    return out


def mixed_releases(packages: Mapping[str, str], rels: Sequence[Release]) -> list[str]:
    """``name A (release R)`` for each installed deb when every one is at some known
    release's version and those are not one release's; [] otherwise."""
    owner: dict[str, str] = {}
    for name, version in packages.items():
        holders = [r.release for r in sorted(rels, key=lambda r: r.order)
                   if r.known_apt().get(name) == version]
        if not holders:
            return []
        owner[name] = holders[-1]
    return ([f"{n} {packages[n]} ({owner[n]})" for n in sorted(owner)]
            if len({r.version for r in rels if r.release in owner.values()}) > 1 else [])


def _bare(host: str, named: Release | None, rels: Sequence[Release],
          venvs: Sequence[Venv]) -> HostRelease:
    """A host without Neuron debs: the named release, or the newest installable one."""
    if named is not None:
        return HostRelease(named, "named", adoptable_venv(named, venvs), note=(
            f"{host}: no Neuron package installed; installing Neuron {named.label()}"))
    ready = installable(rels)
    if not ready:
        return HostRelease(None, "bare", refusal=(
            f"{host}: no Neuron package installed and no release this bundle knows has "
            "every fact needed to install it; use a host from an AWS Neuron image (read "
            "from the host as it is); nothing was changed"))
    rel = newest(ready)
    later = [r for r in rels if r.order > rel.order]
    why = "".join(f"; {r.release} is newer but AWS has not published its "
                  f"{', '.join(r.unknown())}" for r in later)
    return HostRelease(rel, "bare", adoptable_venv(rel, venvs), note=(
        f"{host}: no Neuron package installed; installing Neuron {rel.label()}, the "
        f"newest release the bundle can install from published facts{why} (set "
        "prefixbench_neuron_release to pick another)"))


def _read(host: str, packages: Mapping[str, str], venvs: Sequence[Venv], *,
          facts: HostFacts, rels: Sequence[Release], base: Release | None) -> HostRelease:
    """A host used as it is with what is read from it (``host_read``), or refused in one
    line when it carries no vLLM Neuron venv."""
    usable = sorted((v for v in venvs if v.is_vllm_neuron),
                    key=lambda v: version_tuple(_public(v.plugin)), reverse=True)
    top = newest(rels)
    newer = base is None and all(
        version_tuple(v) >= version_tuple(top.known_apt().get(n, "0"))
        for n, v in packages.items())
    what = (f"on Neuron {base.release}, whose published facts are incomplete" if base
            else "newer than any release this bundle knows" if newer
            else "on Neuron packages no release this bundle knows")
    if not usable:
        looked = ", ".join(host_read.venv_patterns(rels))
        return HostRelease(None, "read", refusal=(
            f"{host}: {what} ({', '.join(f'{n} {v}' for n, v in sorted(packages.items()))}),"
            f" and no vLLM Neuron venv (vllm and vllm-neuron) was found (looked at "
            f"{looked} and vllm_env_adopt_venv): set vllm_env_adopt_venv to the venv that "
            "holds them; nothing was changed"))
    data = host_read.build(host, packages, usable[0], facts=facts, rels=rels, base=base)
    if base is None and not newer:
        data["title"] = "Neuron read from the host, packages no release this bundle knows"
    rel = parse_release(data, f"the release read from {host}")
    return HostRelease(rel, "read", usable[0].path, read=data, note=(
        f"{host}: Neuron read from the host, {what}: {host_read.versions_read(rel)}; "
        f"used as it is, nothing installed or moved; could not check: "
        f"{'; '.join(host_read.unchecked(rel.provenance))}"))


def _named(requested: str, rels: Sequence[Release]) -> Release:
    """``requested`` among ``rels``: an id, or a series' newest."""
    for rel in rels:
        if rel.release == requested:
            return rel
    series = [r for r in rels if r.series == requested]
    if series:
        return newest(series)
    return load_release(requested)  # raises the loader's one-line error


def configured_segment_sizes(settings: Mapping[str, Any]) -> dict[str, list[int]]:
    """``{setting: sizes}``: the segment sizes a host's settings compile (the servers'
    ``kv_segment_size_buckets`` and a segment-size sweep's points)."""
    cfg = settings.get("vllm_service_neuron_config") or {}
    out = {"kv_segment_size_buckets":
           list(cfg.get("kv_segment_size_buckets") or []) if isinstance(cfg, Mapping) else [],
           "prefixbench_sweep_segment_sizes":
           list(settings.get("prefixbench_sweep_segment_sizes") or [])}
    return {k: [int(v) for v in vs] for k, vs in out.items() if vs}


def segment_refusal(host: str, rel: Release, settings: Mapping[str, Any]) -> str:
    """One line when the host's settings use a segment size its release's plugin does
    not support (preflight checked them against every known release's; this is the
    host's own, once read); "" otherwise."""
    for setting, sizes in configured_segment_sizes(settings).items():
        line = releases_segment_refusal(setting, sizes, rel.segment_sizes,
                                        f"Neuron {rel.release}")
        if line:
            return f"{host}: {line}; nothing was changed"
    return ""


def checked(host: str, found: HostRelease, settings: Mapping[str, Any]) -> HostRelease:
    """``found``, refused when the settings do not fit its release (:func:`segment_refusal`)."""
    if found.release is None:
        return found
    refusal = segment_refusal(host, found.release, settings)
    return replace(found, release=None, venv="", refusal=refusal) if refusal else found


def settings_update(settings: Mapping[str, Any], found: HostRelease) -> dict[str, Any]:
    """The settings a host runs with once its release is known: the release's id, and
    the DLAMI venv to adopt when ``vllm_env_adopt_venv`` is ``auto``."""
    if found.release is None:
        return {}
    out: dict[str, Any] = {"prefixbench_neuron_release": found.release.release}
    if found.read:
        out[HOST_RELEASE_KEY] = dict(found.read)
    if str(settings.get("vllm_env_adopt_venv", AUTO)) == AUTO:
        out["vllm_env_adopt_venv"] = found.venv
    return out


def dlami_venvs(rels: Sequence[Release] | None = None) -> list[str]:
    """Every DLAMI venv path a known release names (what the host probe looks at)."""
    return sorted({r.dlami["venv"] for r in (rels if rels is not None else load_all())
                   if r.dlami.get("venv")})
