"""Quotas with names (issue 22, point 3): what a client address and all clients together may
hold of each kind of resource, and what happens at the bound.

A caller may rely on:

* `refuse(kind, client, amount)` says why `amount` more of `kind` for `client` would pass a
  bound, naming the flag that sets it ("--max-client-subscriptions 100 reached for
  192.0.2.7"), or None; it counts each refusal (`refusals`, for /metrics) and logs it at
  most once per client and kind per `log_interval` (one WARNING, with the number refused
  since the last line), never per request;
* `hold(kind, client, key, amount)` and `release(kind, key)` keep the account: what each
  resource `key` holds and for which client; `adjust` changes a held amount (the bytes of a
  pull point as messages come and go); holding again under a key replaces;
* the account is in memory: it is filled again at start from what storage reloads (each
  subscription, pull point and grown topic is stored with the client address that made
  it: gateway.followers.restore_account).

`for_config(cfg)` builds the gateway's quotas from its flags (docs/gateway.md "Security"
lists them); `on_refused(kind, scope)` is told of each refusal (gateway.metrics counts them).

A bound of None is no bound. The per-client bound applies to every client address, loopback
included: give trusted local clients room with the flag.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gateway.config import Config

log = logging.getLogger("gateway.quotas")

#: the kinds the gateway bounds (the bytes of pull points are also bounded per pull point,
#: by --pullpoint-max-bytes, in storage; at each bytes bound the oldest are dropped, as
#: for --pullpoint-max-messages: gateway.pullpoint_bytes)
SUBSCRIPTIONS = "subscriptions"
PULLPOINTS = "pull points"
PULLPOINT_BYTES = "pull-point bytes"
TOPICS = "topics"
KINDS = (SUBSCRIPTIONS, PULLPOINTS, PULLPOINT_BYTES, TOPICS)
SCOPES = ("client", "total")


def topic_key(namespace: str, path: str) -> str:
    """The account's key of a topic (`path`: its steps joined by "/")."""
    return f"{namespace} {path}"


@dataclass(frozen=True)
class Quota:
    """The bounds of one kind of resource: in all (`total`, set by `total_flag`) and per
    client address (`per_client`, by `client_flag`); `unit` names what is counted."""

    kind: str
    total: int | None
    total_flag: str
    per_client: int | None
    client_flag: str
    unit: str = ""


class Quotas:
    """See the module docstring."""

    def __init__(
        self,
        quotas: list[Quota],
        log_interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.quotas = {q.kind: q for q in quotas}
        self.log_interval = log_interval
        self.clock = clock
        self._held: dict[str, dict[str, tuple[str, int]]] = {k: {} for k in self.quotas}
        self._per_client: dict[str, Counter[str]] = {k: Counter() for k in self.quotas}
        self._total: Counter[str] = Counter()
        #: refusals so far by (kind, "client" | "total")
        self.refusals: Counter[tuple[str, str]] = Counter()
        self._logged: dict[tuple[str, str], tuple[float, int]] = {}  # -> (when, since)
        #: told of each refusal: (kind, "client" | "total")
        self.on_refused: Callable[[str, str], None] | None = None

    # ---- the account ----
    def held(self, kind: str, client: str | None = None) -> int:
        """What `client` (or everyone, None) holds of `kind`."""
        if client is None:
            return self._total[kind]
        return self._per_client[kind][client]

    def most_held(self, kind: str) -> int:
        """The most any one client address holds of `kind` (0: nobody holds any)."""
        per = self._per_client[kind]
        return max(per.values(), default=0)

    def hold(self, kind: str, client: str, key: str, amount: int = 1) -> None:
        if key in self._held[kind]:
            self.release(kind, key)
        self._held[kind][key] = (client, amount)
        self._per_client[kind][client] += amount
        self._total[kind] += amount

    def adjust(self, kind: str, key: str, delta: int) -> None:
        """Change what `key` holds by `delta` (unknown keys are ignored)."""
        got = self._held[kind].get(key)
        if got is None:
            return
        client, amount = got
        delta = max(delta, -amount)
        self._held[kind][key] = (client, amount + delta)
        self._per_client[kind][client] += delta
        self._total[kind] += delta

    def release(self, kind: str, key: str) -> None:
        got = self._held[kind].pop(key, None)
        if got is None:
            return
        client, amount = got
        self._per_client[kind][client] -= amount
        if self._per_client[kind][client] <= 0:
            del self._per_client[kind][client]
        self._total[kind] -= amount

    def topic_holders(self, named: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """Of the topics `named` ((namespace, path) pairs), those a client holds, with its
        address: whoever grew them, not only who names them now (a topic grown by a
        Notify whose commit failed is stored by the next Notify on it, maybe another
        client's)."""
        held = self._held[TOPICS]
        out = {}
        for tns, path in named:
            got = held.get(topic_key(tns, path))
            if got is not None:
                out[tns, path] = got[0]
        return out

    def client_of(self, kind: str, key: str) -> str | None:
        got = self._held[kind].get(key)
        return got[0] if got is not None else None

    def amount(self, kind: str, key: str) -> int:
        """What `key` holds of `kind` (0 when it holds nothing)."""
        got = self._held[kind].get(key)
        return got[1] if got is not None else 0

    def room(self, kind: str, client: str) -> int | None:
        """How much more of `kind` `client` may hold before a bound (None: no bound; may
        be negative when the flags were lowered since the account was filled)."""
        q = self.quotas[kind]
        left = [
            bound - held
            for bound, held in (
                (q.per_client, self._per_client[kind][client]),
                (q.total, self._total[kind]),
            )
            if bound is not None
        ]
        return min(left) if left else None

    # ---- the bounds ----
    def refuse(self, kind: str, client: str, amount: int = 1) -> str | None:
        """Why `amount` more of `kind` for `client` would pass a bound, or None (module
        docstring); a refusal is counted and logged (once per client per interval)."""
        q = self.quotas[kind]
        unit = f" {q.unit}" if q.unit else ""
        if q.per_client is not None and self._per_client[kind][client] + amount > q.per_client:
            why = f"{q.client_flag} {q.per_client}{unit} reached for {client}"
            self._refused(kind, "client", client, why)
            return why
        if q.total is not None and self._total[kind] + amount > q.total:
            why = f"{q.total_flag} {q.total}{unit} reached"
            self._refused(kind, "total", client, why)
            return why
        return None

    def _refused(self, kind: str, scope: str, client: str, why: str) -> None:
        self.refusals[(kind, scope)] += 1
        if self.on_refused is not None:
            self.on_refused(kind, scope)
        now = self.clock()
        key = (kind, client)
        last = self._logged.get(key)
        if last is not None and now - last[0] < self.log_interval:
            self._logged[key] = (last[0], last[1] + 1)
            return
        since = last[1] if last is not None else 0
        if len(self._logged) > 10_000:  # bounded: many client addresses fall out
            self._logged.clear()
        self._logged[key] = (now, 0)
        more = f" (+{since} more since the last line)" if since else ""
        log.warning(
            "refused %s for %s: %s; logged at most every %g s per client%s",
            kind, client, why, self.log_interval, more,
        )  # fmt: skip


def for_config(cfg: Config) -> Quotas:
    """The gateway's quotas, from its flags."""
    return Quotas(
        [
            Quota(
                SUBSCRIPTIONS,
                cfg.max_subscriptions,
                "--max-subscriptions",
                cfg.max_client_subscriptions,
                "--max-client-subscriptions",
            ),
            Quota(
                PULLPOINTS,
                cfg.max_pullpoints,
                "--max-pullpoints",
                cfg.max_client_pullpoints,
                "--max-client-pullpoints",
            ),
            Quota(
                PULLPOINT_BYTES,
                cfg.max_pullpoint_bytes,
                "--max-pullpoint-bytes",
                cfg.max_client_pullpoint_bytes,
                "--max-client-pullpoint-bytes",
                "bytes",
            ),
            Quota(
                TOPICS, cfg.max_topics, "--max-topics", cfg.max_client_topics, "--max-client-topics"
            ),
        ],
        log_interval=cfg.quota_log_interval,
    )
