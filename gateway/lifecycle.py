"""The lifecycles of the broker's resources, as data (in the manner of h11's `_state.py`).

Each resource kind goes through phases; each step below is one transition of
gateway.state (a public method of `BrokerState` of the same name), the phases it may start
from, the phase it leads to, and the key it is logged under by gateway.oplog
(docs/gateway.md "Lifecycle events"). A step the table does not allow is a bug, refused
with `InvalidTransition`. A new lifecycle event is a row here and a method of the state;
its log line follows from the row.

    kind          step       from              to        logged as
    subscription  create     new               active    subscription_created
                  restore    new               (stored)  (not logged)
                  renew      active, paused    (same)    subscription_renewed
                  pause      active            paused    subscription_paused
                  resume     paused            active    subscription_resumed
                  end        active, paused    ended     subscription_ended (+ reason)
                  expire     active, paused    ended     subscription_expired
    pull point    create     new               active    pullpoint_created
                  restore    new               active    (not logged)
                  destroy    active            ended     pullpoint_destroyed (+ reason)
    registration  create     new               active    registration_created
                  restore    new               active    registration_restored
                  renew      active            active    registration_renewed
                  end        active            ended     registration_ended (+ reason)
                  expire     active            ended     registration_expired

Why a resource ends is `Why`; which reasons each ending step takes is in its row.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Kind(Enum):
    SUBSCRIPTION = "subscription"  # WS-BaseNotification 1.3 §4.2, §6
    PULLPOINT = "pullpoint"  # WS-BaseNotification 1.3 §5
    REGISTRATION = "registration"  # WS-BrokeredNotification 1.0 §5.4, §6


class Phase(Enum):
    NEW = "new"  # not (yet) known to the broker
    ACTIVE = "active"
    PAUSED = "paused"  # a subscription between PauseSubscription and ResumeSubscription
    ENDED = "ended"  # gone, for the reason its step gives


class Why(Enum):
    """Why a resource ended: the `reason` field of its log line."""

    UNSUBSCRIBE = "Unsubscribe"  # WS-BaseNotification 1.3 §6.1.2 Unsubscribe
    DESTROY = "Destroy"  # WS-ResourceLifetime 1.2 §4.1, immediate termination
    DESTROY_PULLPOINT = "DestroyPullPoint"  # WS-BaseNotification 1.3 §5.1.4 DestroyPullPoint
    DESTROY_REGISTRATION = "DestroyRegistration"  # WS-BrokeredNotification 1.0 §6
    PULLPOINT_DESTROYED = "pull point destroyed"  # its consumer, a pull point, went
    CONSUMER_DEAD = "consumer dead"  # failing for --consumer-dead-after
    REGISTERED_AGAIN = "registered again"  # the same publisher registered anew
    EXPIRED = "expired"  # its TerminationTime passed
    IDLE = "idle"  # a pull point nobody read for --pullpoint-idle-expiry


class InvalidTransition(RuntimeError):
    """A transition the lifecycle does not have (a bug: the handlers check first)."""


@dataclass(frozen=True)
class Step:
    kind: Kind
    name: str
    sources: frozenset[Phase]
    #: the phase it leads to; None: the one it had (renew) or was stored with (restore)
    target: Phase | None
    #: the operator log's event key (gateway.oplog), None: not logged
    event: str | None
    #: the log line's message
    message: str = ""
    #: the reasons an ending step is taken for
    reasons: frozenset[Why] = frozenset()
    #: whether it may change who wants a topic (demand-based publishing)
    moves_demand: bool = True

    def check(self, phase: Phase, why: Why | None = None) -> None:
        """Raise InvalidTransition unless this step may start from `phase` (for `why`)."""
        if phase not in self.sources:
            raise InvalidTransition(f"{self.kind.value} {self.name} from {phase.value}")
        if self.reasons and why not in self.reasons:
            raise InvalidTransition(f"{self.kind.value} {self.name} for {why}")


def _step(
    kind: Kind,
    name: str,
    sources: set[Phase],
    target: Phase | None,
    event: str | None,
    message: str = "",
    reasons: set[Why] | None = None,
    moves_demand: bool = True,
) -> Step:
    return Step(kind, name, frozenset(sources), target, event, message,
                frozenset(reasons or ()), moves_demand)  # fmt: skip


SUB, PP, REG = Kind.SUBSCRIPTION, Kind.PULLPOINT, Kind.REGISTRATION
NEW, ACTIVE, PAUSED, ENDED = Phase.NEW, Phase.ACTIVE, Phase.PAUSED, Phase.ENDED
W = Why

# fmt: off
SUBSCRIBE = _step(SUB, "create", {NEW}, ACTIVE, "subscription_created", "subscription created")
RESTORE_SUBSCRIPTION = _step(SUB, "restore", {NEW}, None, None)
RENEW_SUBSCRIPTION = _step(SUB, "renew", {ACTIVE, PAUSED}, None, "subscription_renewed",
                           "subscription renewed", moves_demand=False)
PAUSE = _step(SUB, "pause", {ACTIVE}, PAUSED, "subscription_paused", "subscription paused")
RESUME = _step(SUB, "resume", {PAUSED}, ACTIVE, "subscription_resumed", "subscription resumed")
END_SUBSCRIPTION = _step(SUB, "end", {ACTIVE, PAUSED}, ENDED, "subscription_ended",
                         "subscription ended",
                         {W.UNSUBSCRIBE, W.DESTROY, W.PULLPOINT_DESTROYED, W.CONSUMER_DEAD})
EXPIRE_SUBSCRIPTION = _step(SUB, "expire", {ACTIVE, PAUSED}, ENDED, "subscription_expired",
                            "subscription expired", {W.EXPIRED})

CREATE_PULLPOINT = _step(PP, "create", {NEW}, ACTIVE, "pullpoint_created",
                         "pull point created", moves_demand=False)
RESTORE_PULLPOINT = _step(PP, "restore", {NEW}, ACTIVE, None, moves_demand=False)
DESTROY_PULLPOINT = _step(PP, "destroy", {ACTIVE}, ENDED, "pullpoint_destroyed",
                          "pull point destroyed", {W.DESTROY_PULLPOINT, W.IDLE})

REGISTER = _step(REG, "create", {NEW}, ACTIVE, "registration_created", "publisher registered")
RESTORE_REGISTRATION = _step(REG, "restore", {NEW}, ACTIVE, "registration_restored",
                             "publisher registration reloaded")
RENEW_REGISTRATION = _step(REG, "renew", {ACTIVE}, ACTIVE, "registration_renewed",
                           "publisher registration renewed", moves_demand=False)
END_REGISTRATION = _step(REG, "end", {ACTIVE}, ENDED, "registration_ended",
                         "publisher registration ended",
                         {W.DESTROY_REGISTRATION, W.DESTROY, W.REGISTERED_AGAIN})
EXPIRE_REGISTRATION = _step(REG, "expire", {ACTIVE}, ENDED, "registration_expired",
                            "publisher registration expired", {W.EXPIRED})
# fmt: on

#: every step, in the order of the table in the module docstring
STEPS: tuple[Step, ...] = (
    SUBSCRIBE, RESTORE_SUBSCRIPTION, RENEW_SUBSCRIPTION, PAUSE, RESUME, END_SUBSCRIPTION,
    EXPIRE_SUBSCRIPTION, CREATE_PULLPOINT, RESTORE_PULLPOINT, DESTROY_PULLPOINT, REGISTER,
    RESTORE_REGISTRATION, RENEW_REGISTRATION, END_REGISTRATION, EXPIRE_REGISTRATION,
)  # fmt: skip
