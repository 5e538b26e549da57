"""Issue 11: what a client following WS-BaseNotification 1.3, the official bw-2.wsdl and
WS-Topics 1.3 to the letter gets from a real gateway over HTTP. Expected actions come from
the WSDL (tests/wsdl_actions.py), element names and validity from the official schemas."""

from __future__ import annotations

import pytest
from gwtest import (
    call,
    sub_address,
    subscribe_body,
    topic_filter,
    validate,
)

from tests.wsdl_actions import action as wsdl_action

# ---------------------------------------------------------------- 1. Pause/Resume actions
OLD_SM = "http://docs.oasis-open.org/wsn/bw-2/SubscriptionManager/"


@pytest.mark.parametrize("op", ["PauseSubscription", "ResumeSubscription"])
async def test_pause_resume_answer_with_the_pausable_port_type_action(
    gw, consumer, op: str
) -> None:
    """bw-2.wsdl has PauseSubscription/ResumeSubscription only in
    PausableSubscriptionManager: the response action is that portType's; the request
    action of the WSDL, the pre-issue-11 one (.../SubscriptionManager/...) and none at all
    are all accepted."""
    r = await call(gw.url, subscribe_body(consumer.url, topic_filter("tns:t")))
    addr = sub_address(r)
    for act in (wsdl_action("PausableSubscriptionManager", op), f"{OLD_SM}{op}Request", None):
        r = await call(addr, f"<wsnt:{op}/>", action=act)
        assert r.status == 200, r.text
        validate(r.body)
        assert r.header("Action") == wsdl_action("PausableSubscriptionManager", op, "output")


@pytest.mark.parametrize("port_type", ["SubscriptionManager", "PausableSubscriptionManager"])
@pytest.mark.parametrize("op", ["Renew", "Unsubscribe"])
async def test_renew_unsubscribe_answer_in_the_port_type_of_the_request(
    gw, consumer, port_type: str, op: str
) -> None:
    """Renew and Unsubscribe are in both portTypes of bw-2.wsdl: the answer's action is the
    output of the portType whose input action the request used."""
    r = await call(gw.url, subscribe_body(consumer.url, topic_filter("tns:t")))
    addr = sub_address(r)
    body = "<wsnt:Renew><wsnt:TerminationTime>PT5M</wsnt:TerminationTime></wsnt:Renew>"
    r = await call(
        addr, body if op == "Renew" else "<wsnt:Unsubscribe/>", action=wsdl_action(port_type, op)
    )
    assert r.status == 200, r.text
    validate(r.body)
    assert r.header("Action") == wsdl_action(port_type, op, "output")
