"""The broker's state and its transitions (gateway.state, gateway.lifecycle) against the real
state object: no HTTP, no SQLite. What each transition changes, the events it sends (one
seam: a recording observer sees everything), demand recomputed once per transition, and
the transitions the lifecycle table refuses."""

from __future__ import annotations

import logging

import pytest
from gwtest import FULL
from gwunit import DEV, registration, state, subscription, topic

from gateway import lifecycle as lc
from gateway import topics
from gateway.lifecycle import InvalidTransition, Phase, Why
from gateway.state import (
    DemandChanged,
    MessagesArrived,
    PullPoint,
    PullPointChanged,
    RegistrationChanged,
    Restored,
    SubscriptionChanged,
    TopicsGrown,
)

T = topic("tns:t")
TEMP = topic("dev:esp-1/temperature", DEV)


def steps(events: list[object]) -> list[tuple[str, str, str | None]]:
    """(kind, step, why) of the lifecycle events, ("demand", topic, demanded) of the others."""
    out: list[tuple[str, str, str | None]] = []
    for e in events:
        if isinstance(e, SubscriptionChanged | PullPointChanged | RegistrationChanged):
            out.append((e.step.kind.value, e.step.name, e.why.value if e.why else None))
        elif isinstance(e, DemandChanged):
            out.append(("demand", str(e.topic), str(e.demanded)))
        else:
            out.append((type(e).__name__, "", None))
    return out


# ------------------------------------------------------------------ the table
def test_the_lifecycle_table_is_consistent() -> None:
    keys = [s.event for s in lc.STEPS if s.event]
    assert len(keys) == len(set(keys)), "one log key per step"
    ending = {w for s in lc.STEPS for w in s.reasons}
    assert ending == set(Why), "every reason ends something"
    for s in lc.STEPS:
        assert (s.target is Phase.ENDED) == bool(s.reasons), s
        assert s.event is None or s.message, s
        assert f"{s.name} " in lc.__doc__ or s.name in lc.__doc__  # the docstring's table
    with pytest.raises(InvalidTransition):
        lc.PAUSE.check(Phase.PAUSED)
    with pytest.raises(InvalidTransition):
        lc.END_SUBSCRIPTION.check(Phase.ACTIVE, Why.REGISTERED_AGAIN)


# ------------------------------------------------------------------ subscriptions
def test_subscribe_pause_resume_renew_unsubscribe() -> None:
    s, rec, clock = state()
    s.grow_topics([T])  # a Notify grows its topics before it asks who wants them
    rec.take()
    sub = subscription()
    s.add_subscription(sub)
    assert s.subscriptions[sub.id] is sub and s.wanting(T, clock()) == [sub]
    s.pause_subscription(sub.id)
    assert sub.paused and s.wanting(T, clock()) == []
    s.resume_subscription(sub.id)
    assert not sub.paused and s.wanting(T, clock()) == [sub]
    later = clock.now.replace(year=2031)
    s.renew_subscription(sub.id, later)
    assert sub.termination == later
    s.end_subscriptions([sub.id], Why.UNSUBSCRIBE)
    assert sub.id not in s.subscriptions and s.wanting(T, clock()) == []
    assert steps(rec.events) == [
        ("subscription", "create", None),
        ("subscription", "pause", None),
        ("subscription", "resume", None),
        ("subscription", "renew", None),
        ("subscription", "end", "Unsubscribe"),
    ]


def test_the_table_refuses_what_the_spec_has_not() -> None:
    s, rec, _ = state()
    sub = subscription()
    s.add_subscription(sub)
    with pytest.raises(InvalidTransition):
        s.resume_subscription(sub.id)  # active: the handler answers without a transition
    with pytest.raises(InvalidTransition):
        s.add_subscription(sub)  # twice
    with pytest.raises(InvalidTransition):
        s.end_subscriptions([sub.id], Why.REGISTERED_AGAIN)
    s.end_subscriptions([sub.id], Why.DESTROY)
    with pytest.raises(InvalidTransition):
        s.pause_subscription(sub.id)  # ended
    with pytest.raises(InvalidTransition):
        s.renew_subscription(sub.id, None)
    s.end_subscriptions([sub.id], Why.UNSUBSCRIBE)  # ended already: nothing happens
    assert steps(rec.events) == [
        ("subscription", "create", None),
        ("subscription", "end", "Destroy"),
    ]


def test_expiry_is_its_own_step_and_sees_paused_subscriptions() -> None:
    s, rec, clock = state()
    soon = subscription(termination=clock.now.replace(minute=5), paused=True)
    never = subscription()
    s.add_subscription(soon)
    s.add_subscription(never)
    assert s.expired(clock()) == ([], [])
    clock.advance(minutes=5)
    assert s.expired(clock()) == ([soon.id], [])
    rec.take()
    s.end_subscriptions([soon.id], Why.EXPIRED)
    (e,) = rec.events
    assert isinstance(e, SubscriptionChanged) and e.step is lc.EXPIRE_SUBSCRIPTION
    assert set(s.subscriptions) == {never.id}


def test_wanting_all_expressions_no_filter_and_order() -> None:
    s, _, clock = state()
    s.grow_topics([T])
    both = subscription("tns:t", sid="s2")
    both.topic_exprs.append(topics.compile_expression(FULL, "tns:other", {"tns": "urn:test"}))
    every = subscription(None, sid="s1")
    exact = subscription("tns:t", sid="s3")
    expired = subscription("tns:t", sid="s0", termination=clock.now)
    for x in (both, every, exact, expired):
        s.add_subscription(x)
    # every expression must select the topic; no filter selects all; expired never
    assert s.wanting(T, clock()) == [every, exact]
    assert s.wanting(None, clock()) == [every]


# ------------------------------------------------------------------ demand
def test_demand_follows_subscriptions_once_per_transition() -> None:
    s, rec, _ = state()
    reg = registration("temperature")
    s.grow_topics(sorted(reg.named_topics, key=str))
    rec.take()
    s.add_registration(reg)
    assert steps(rec.take()) == [
        ("registration", "create", None),
        ("demand", str(TEMP), "False"),
    ]
    subs = [subscription("dev:*/temperature", FULL, nsmap=DEV) for _ in range(3)]
    for x in subs:
        s.add_subscription(x)
    assert steps(rec.take()) == [
        ("subscription", "create", None),
        ("demand", str(TEMP), "True"),
        ("subscription", "create", None),
        ("subscription", "create", None),
    ]
    assert s.has_demand(TEMP)
    s.renew_subscription(subs[0].id, None)  # does not move demand: not recomputed
    assert steps(rec.take()) == [("subscription", "renew", None)]
    s.end_subscriptions([x.id for x in subs[1:]], Why.UNSUBSCRIBE)
    s.pause_subscription(subs[0].id)  # the last one wanting it
    assert steps(rec.take()) == [
        ("subscription", "end", "Unsubscribe"),
        ("subscription", "end", "Unsubscribe"),
        ("subscription", "pause", None),
        ("demand", str(TEMP), "False"),
    ]
    s.resume_subscription(subs[0].id)
    assert steps(rec.take())[-1] == ("demand", str(TEMP), "True")
    assert not s.has_demand(topic("dev:esp-1/humidity", DEV))


def test_a_registration_without_demand_has_no_demand_events() -> None:
    s, rec, _ = state()
    s.add_registration(registration("temperature", demand=False))
    s.add_subscription(subscription("dev:*/temperature", FULL, nsmap=DEV))
    assert [e for e in rec.events if isinstance(e, DemandChanged)] == []


# ------------------------------------------------------------------ registrations
def test_registering_again_ends_the_replaced_registration_first() -> None:
    s, rec, clock = state()
    old = registration("temperature")
    s.add_registration(old)
    new = registration("temperature")
    rec.take()
    s.add_registration(new, replaces=[old.id])
    assert list(s.registrations) == [new.id]
    assert steps(rec.events) == [
        ("registration", "end", "registered again"),
        ("registration", "create", None),
        ("demand", str(TEMP), "False"),  # told again for the new registration
    ]
    assert s.registrations_of("http://127.0.0.1:9/producer") == [new]
    s.registration_seen(new.id, clock())
    assert new.last_seen == clock()


def test_registration_renewal_expiry_and_destruction() -> None:
    s, rec, clock = state()
    a = registration("temperature", termination=clock.now.replace(minute=1))
    b = registration("humidity", publisher="http://127.0.0.1:9/other")
    s.add_registration(a)
    s.add_registration(b)
    rec.take()
    s.renew_registration(a.id, clock.now.replace(minute=10))
    clock.advance(minutes=5)
    assert s.expired(clock()) == ([], [])
    clock.advance(minutes=5)
    assert s.expired(clock()) == ([], [a.id])
    s.end_registrations([a.id], Why.EXPIRED)
    s.end_registrations([b.id], Why.DESTROY_REGISTRATION)
    with pytest.raises(InvalidTransition):
        s.renew_registration(a.id, None)
    assert [x for x in steps(rec.events) if x[0] == "registration"] == [
        ("registration", "renew", None),
        ("registration", "expire", "expired"),
        ("registration", "end", "DestroyRegistration"),
    ]
    assert s.registrations == {}


# ------------------------------------------------------------------ pull points
def test_pull_point_messages_and_destruction_with_its_subscriptions() -> None:
    s, rec, _ = state()
    pp = PullPoint("p1", s.clock())
    s.add_pullpoint(pp)
    feeding = subscription(pullpoint="p1")
    other = subscription()
    s.add_subscription(feeding)
    s.add_subscription(other)
    rec.take()
    s.notifications_accepted({T: "<x/>"}, {"p1": 3, "gone": 1}, {"p1": 1})
    assert (pp.queued, pp.dropped) == (2, 1) and s.current[T] == "<x/>"
    assert rec.take() == [MessagesArrived(("p1",))]
    s.messages_taken("p1", 5)
    assert pp.queued == 0
    assert s.feeding("p1") == [feeding.id]
    s.destroy_pullpoint("p1")
    assert "p1" not in s.pullpoints and set(s.subscriptions) == {other.id}
    assert steps(rec.take()) == [
        ("subscription", "end", "pull point destroyed"),
        ("pullpoint", "destroy", "DestroyPullPoint"),
    ]
    with pytest.raises(InvalidTransition):
        s.destroy_pullpoint("p1")


# ------------------------------------------------------------------ topics, restore
def test_topic_growth_is_told_once_and_refused_by_a_fixed_set() -> None:
    s, rec, _ = state()
    assert s.grow_topics([T, T]) == [T]
    assert s.grow_topics([T]) == []
    assert rec.take() == [TopicsGrown((T,))]
    fixed, rec2, _ = state(fixed=True)
    with pytest.raises(topics.TopicError):
        fixed.grow_topics([T])
    assert T not in fixed.ts and rec2.events == []
    # at restore, a topic the set refuses now is left out and said why (upkeep logs it)
    ((refused, why),) = fixed.restore_topics([T])
    assert refused == T and isinstance(why, topics.TopicError) and T not in fixed.ts


def test_restore_is_one_transition() -> None:
    s, rec, _ = state()
    reg = registration("temperature")
    s.restore_topics(sorted(reg.named_topics, key=str))
    subs = [subscription("dev:*/temperature", FULL, nsmap=DEV), subscription(paused=True)]
    s.restore(
        Restored(
            current={T: "<x/>"},
            pullpoints=[PullPoint("p1", s.clock(), queued=4)],
            registrations=[reg],
            subscriptions=subs,
        )
    )
    assert reg.restored and s.pullpoints["p1"].queued == 4 and s.current[T] == "<x/>"
    assert steps(rec.events) == [
        ("pullpoint", "restore", None),
        ("registration", "restore", None),
        ("subscription", "restore", None),
        ("subscription", "restore", None),
        ("demand", str(TEMP), "True"),  # computed once, after everything is back
    ]
    assert s.phase(subs[1]) is Phase.PAUSED


def test_a_failing_observer_does_not_undo_a_transition(caplog: pytest.LogCaptureFixture) -> None:
    s, rec, _ = state()

    def broken(_e: object) -> None:
        raise RuntimeError("bug")

    s.observe(broken)
    later: list[object] = []
    s.observe(later.append)
    sub = subscription()
    with caplog.at_level(logging.ERROR, logger="gateway.state"):
        s.add_subscription(sub)
    assert sub.id in s.subscriptions and len(rec.events) == len(later) == 1
    assert "state observer" in caplog.text
