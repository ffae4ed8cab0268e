"""Who compiles a key the store lacks: a claim per key, taken by the first host to ask.

Plain Python, run by ``library/prefixbench_compile_cache.py`` on the controller (a
directory store) or on the hosts (an S3 store), and unit-tested.

Hosts progress through their configurations on their own (the bench play's ``free``
strategy), so who leads a key cannot be decided by looking at every host at one task: a
host asks the store instead, when it gets there. The first host to ask for a key the
store lacks takes its claim and compiles; a host that asks later finds the claim and
either waits for that host's publish (``prefixbench_compile_cache_cold: wait``) or
compiles too. The leader releases the claim when it is done with it: ``published``
removes it (the store's manifest says the rest), ``failed`` (a server that never became
healthy, a publish that did not happen) stays, so a waiting host stops waiting as soon
as there is nothing to wait for.

Claims live under a scope, the invocation of the playbook (``prefixbench_run``'s
``attempt``): a claim left by a controller that died belongs to a scope no later run
asks about, so it never holds anybody up.

* :class:`DirClaims`, a directory store: ``<store>/.claims/<scope>/<key>.json``,
  created whole with ``link(2)`` from a temporary file (which fails when the name
  exists: one winner), and rewritten with a rename when released.
* :class:`S3Claims`: ``<prefix>/.claims/<scope>/<key>.json``, put with
  ``If-None-Match: *`` (412 or 409 for every host but the first), overwritten when
  released.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

CLAIMS = ".claims"
#: A claim's outcomes once its holder is done with it (None: still compiling).
OUTCOMES = ("published", "failed")


def _record(host: str, scope: str, outcome: str | None = None, why: str = ""
            ) -> dict[str, Any]:
    return {"host": host, "scope": scope, "outcome": outcome, "why": why,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _encode(record: Mapping[str, Any]) -> bytes:
    return (json.dumps(dict(record), sort_keys=True) + "\n").encode()


def _decode(data: bytes) -> dict[str, Any]:
    try:
        found = json.loads(data.decode("utf-8"))
    except ValueError:
        found = None
    return found if isinstance(found, dict) else {"host": "?", "outcome": None}


def _check_outcome(outcome: str) -> None:
    if outcome not in OUTCOMES:
        raise ValueError(f"a claim's outcome is one of {', '.join(OUTCOMES)}, not {outcome!r}")


# -- a directory store, on the controller ------------------------------------------------

def _temp_with(folder: Path, data: bytes) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=".tmp-claim-", dir=folder)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    Path(tmp).chmod(0o644)
    return Path(tmp)


class DirClaims:
    """The claims of one scope in a directory store."""

    def __init__(self, store: str, scope: str) -> None:
        self.folder = Path(store) / CLAIMS / scope
        self.scope = scope

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def holder(self, key: str) -> dict[str, Any] | None:
        """The claim of ``key``, or None when nobody has asked yet."""
        try:
            return _decode(self.path(key).read_bytes())
        except FileNotFoundError:
            return None

    def claim(self, key: str, host: str) -> tuple[bool, dict[str, Any]]:
        """Take the claim of ``key`` for ``host`` unless another host has it:
        (won, holder)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        mine = _record(host, self.scope)
        tmp = _temp_with(self.folder, _encode(mine))
        try:
            os.link(tmp, self.path(key))  # the claim appears whole, or not at all
        except FileExistsError:
            found = self.holder(key) or mine
            return found.get("host") == host, found
        finally:
            tmp.unlink(missing_ok=True)
        return True, mine

    def release(self, key: str, host: str, outcome: str, why: str = ""
                ) -> dict[str, Any] | None:
        """Mark ``host``'s claim of ``key`` done; a claim another host holds is left
        alone. Returns the claim as it now stands."""
        _check_outcome(outcome)
        found = self.holder(key)
        if found is None or found.get("host") != host:
            return found
        done = _record(host, self.scope, outcome, why)
        if outcome == "published":  # the manifest says it all from now on
            self.path(key).unlink(missing_ok=True)
            return done
        tmp = _temp_with(self.folder, _encode(done))
        try:
            tmp.replace(self.path(key))
        finally:
            tmp.unlink(missing_ok=True)
        return done


# -- an S3 store, from the host ------------------------------------------------------------

class S3Claims:
    """The claims of one scope in ``s3://bucket/prefix``. ``lost`` tells the store's
    answer to a second conditional put (412 Precondition Failed, 409
    ConditionalRequestConflict), ``not_found`` a missing object."""

    def __init__(self, client: Any, bucket: str, prefix: str, scope: str, *,
                 lost: Callable[[BaseException], bool],
                 not_found: Callable[[BaseException], bool]) -> None:
        self.client, self.bucket, self.scope = client, bucket, scope
        self.base = f"{prefix}/{CLAIMS}/{scope}" if prefix else f"{CLAIMS}/{scope}"
        self.lost, self.not_found = lost, not_found

    def object(self, key: str) -> str:
        return f"{self.base}/{key}.json"

    def holder(self, key: str) -> dict[str, Any] | None:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self.object(key))["Body"]
        except Exception as exc:
            if self.not_found(exc):
                return None
            raise
        return _decode(body.read())

    def claim(self, key: str, host: str) -> tuple[bool, dict[str, Any]]:
        mine = _record(host, self.scope)
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.object(key),
                                   IfNoneMatch="*", ContentType="application/json",
                                   Body=_encode(mine))
        except Exception as exc:
            if not self.lost(exc):
                raise
            found = self.holder(key) or mine
            return found.get("host") == host, found
        return True, mine

    def release(self, key: str, host: str, outcome: str, why: str = ""
                ) -> dict[str, Any] | None:
        _check_outcome(outcome)
        found = self.holder(key)
        if found is None or found.get("host") != host:
            return found
        done = _record(host, self.scope, outcome, why)
        if outcome == "published":
            self.client.delete_object(Bucket=self.bucket, Key=self.object(key))
            return done
        self.client.put_object(Bucket=self.bucket, Key=self.object(key),
                               ContentType="application/json", Body=_encode(done))
        return done


# -- waiting for the holder's publish ------------------------------------------------------

def wait(look: Callable[[], dict[str, Any] | None],
         holder: Callable[[], dict[str, Any] | None], *, slice_s: float, poll_s: float,
         sleep: Callable[[float], None] = time.sleep,
         clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Poll the store for up to ``slice_s`` seconds: ``state`` is ``published`` (with
    the ``manifest``), ``failed`` (the holder gave up, or nobody holds the claim: there is
    nothing to wait for), or ``waiting`` (ask again). The caller repeats the call until
    its own deadline, so each call is short and the console shows progress between."""
    end = clock() + slice_s
    while True:
        manifest = look()
        if manifest is not None:
            return {"state": "published", "manifest": manifest, "holder": holder()}
        found = holder()
        if found is None or found.get("outcome") in OUTCOMES:
            # A holder that published has its manifest visible: look once more.
            manifest = look()
            if manifest is not None:
                return {"state": "published", "manifest": manifest, "holder": found}
            return {"state": "failed", "manifest": None, "holder": found}
        if clock() >= end:
            return {"state": "waiting", "manifest": None, "holder": found}
        sleep(min(poll_s, max(0.0, end - clock())))
