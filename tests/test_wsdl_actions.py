"""The WSDL action derivation the conformance tests rely on (tests/wsdl_actions.py)."""

from __future__ import annotations

from tests.wsdl_actions import WSDL_DIR, action, official_actions, wsdl_actions


def test_pause_and_resume_live_in_the_pausable_port_type() -> None:
    # bw-2.wsdl: PauseSubscription/ResumeSubscription only in PausableSubscriptionManager
    table = official_actions()
    assert ("SubscriptionManager", "PauseSubscription") not in table
    assert action("PausableSubscriptionManager", "PauseSubscription", "output") == (
        "http://docs.oasis-open.org/wsn/bw-2/PausableSubscriptionManager/PauseSubscriptionResponse"
    )


def test_default_names_of_unnamed_inputs_follow_wsdl_1_1() -> None:
    # WSDL 1.1 §2.4.5: request-response gets <op>Request/<op>Response, one-way <op>
    a = official_actions()[("NotificationProducer", "Subscribe")]
    assert a.input.endswith("/NotificationProducer/SubscribeRequest")
    assert a.output is not None and a.output.endswith("/SubscribeResponse")
    n = official_actions()[("NotificationConsumer", "Notify")]
    assert n.output is None and n.input.endswith("/NotificationConsumer/Notify")
    assert a.faults["InvalidFilterFault"].endswith("/Subscribe/Fault/InvalidFilterFault")


def test_explicit_action_wins_and_urn_uses_colons() -> None:
    doc = """<wsdl:definitions xmlns:wsdl="http://schemas.xmlsoap.org/wsdl/"
      xmlns:wsam="http://www.w3.org/2007/05/addressing/metadata" targetNamespace="urn:x">
      <wsdl:portType name="P"><wsdl:operation name="Op">
        <wsdl:input message="m" wsam:Action="urn:explicit"/><wsdl:output message="m"/>
      </wsdl:operation></wsdl:portType></wsdl:definitions>"""
    a = wsdl_actions(doc)[("P", "Op")]
    assert a.input == "urn:explicit"
    assert a.output == "urn:x:P:OpResponse"


def test_the_official_files_are_there() -> None:
    for f in ("bw-2.wsdl", "b-2.xsd", "bf-2.xsd", "r-2.xsd", "t-1.xsd", "ws-addr.xsd"):
        assert (WSDL_DIR / f).is_file(), f
