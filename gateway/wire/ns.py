"""Namespace URIs, QNames and WS-Addressing action URIs used by the broker.

All names come from WS-BaseNotification 1.3 (b-2/bw-2), WS-BrokeredNotification 1.3
(br-2/brw-2), WS-Topics 1.3 (t-1), WSRF (bf-2, r-2, rp-2, rl-2) and WS-Addressing 1.0.
"""

from __future__ import annotations

SOAP11 = "http://schemas.xmlsoap.org/soap/envelope/"
SOAP12 = "http://www.w3.org/2003/05/soap-envelope"
WSA = "http://www.w3.org/2005/08/addressing"
#: the 2004/08 member submission, still sent by older stacks: its headers are understood
WSA2004 = "http://schemas.xmlsoap.org/ws/2004/08/addressing"
WSA_ANONYMOUS = WSA + "/anonymous"
WSA_NONE = WSA + "/none"
WSA_FAULT_ACTION = WSA + "/fault"
WSNT = "http://docs.oasis-open.org/wsn/b-2"
WSNTW = "http://docs.oasis-open.org/wsn/bw-2"
BR = "http://docs.oasis-open.org/wsn/br-2"
BRW = "http://docs.oasis-open.org/wsn/brw-2"
WSTOP = "http://docs.oasis-open.org/wsn/t-1"
BF = "http://docs.oasis-open.org/wsrf/bf-2"
WSRF_R = "http://docs.oasis-open.org/wsrf/r-2"
WSRF_RP = "http://docs.oasis-open.org/wsrf/rp-2"
WSRF_RPW = "http://docs.oasis-open.org/wsrf/rpw-2"
WSRF_RL = "http://docs.oasis-open.org/wsrf/rl-2"
WSRF_RLW = "http://docs.oasis-open.org/wsrf/rlw-2"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
XML_NS = "http://www.w3.org/XML/1998/namespace"
EDGE = "urn:wsn-edge"

#: WS-Topics 1.3 / WS-BaseNotification 1.3: XPath 1.0 dialect of MessageContent and
#: ProducerProperties filters.
XPATH_DIALECT = "http://www.w3.org/TR/1999/REC-xpath-19991116"

#: design.md: the device's own topic namespace and the broker's per-device namespace.
DEVICE_TOPICS_NS = "urn:wsn-edge:device-topics"
DEVICES_NS = "urn:wsn-edge:devices"

#: WS-BaseNotification 1.3 §1.4 Fault Definitions: fault action URI for every WSN fault.
WSN_FAULT_ACTION = "http://docs.oasis-open.org/wsn/fault"

NSMAP: dict[str, str] = {
    "wsa": WSA,
    "wsnt": WSNT,
    "wstop": WSTOP,
    "wsrf-bf": BF,
    "wsrf-r": WSRF_R,
    "wsrf-rp": WSRF_RP,
    "wsrf-rl": WSRF_RL,
    "br": BR,
    "edge": EDGE,
    "xsi": XSI,
}


def q(ns: str, local: str) -> str:
    """Clark notation `{ns}local` (what lxml uses as tag)."""
    return f"{{{ns}}}{local}"


# ---- action URIs (WS-BaseNotification 1.3 §3-6, WS-BrokeredNotification 1.3) ----
A_NOTIFY = WSNTW + "/NotificationConsumer/Notify"
A_SUBSCRIBE = WSNTW + "/NotificationProducer/SubscribeRequest"
A_SUBSCRIBE_RESP = WSNTW + "/NotificationProducer/SubscribeResponse"
A_GCM = WSNTW + "/NotificationProducer/GetCurrentMessageRequest"
A_GCM_RESP = WSNTW + "/NotificationProducer/GetCurrentMessageResponse"
A_GET_MESSAGES = WSNTW + "/PullPoint/GetMessagesRequest"
A_GET_MESSAGES_RESP = WSNTW + "/PullPoint/GetMessagesResponse"
A_DESTROY_PP = WSNTW + "/PullPoint/DestroyPullPointRequest"
A_DESTROY_PP_RESP = WSNTW + "/PullPoint/DestroyPullPointResponse"
A_CREATE_PP = WSNTW + "/CreatePullPoint/CreatePullPointRequest"
A_CREATE_PP_RESP = WSNTW + "/CreatePullPoint/CreatePullPointResponse"
A_RENEW = WSNTW + "/SubscriptionManager/RenewRequest"
A_RENEW_RESP = WSNTW + "/SubscriptionManager/RenewResponse"
A_UNSUBSCRIBE = WSNTW + "/SubscriptionManager/UnsubscribeRequest"
A_UNSUBSCRIBE_RESP = WSNTW + "/SubscriptionManager/UnsubscribeResponse"
# bw-2.wsdl declares PauseSubscription/ResumeSubscription only in the
# PausableSubscriptionManager portType (WS-Addressing 1.0 Metadata §4.4.4 default actions).
# Requests are dispatched on the Body element, so the ".../SubscriptionManager/Pause..."
# actions older clients (and wsn-edge before issue 11) send are still accepted.
A_PAUSE = WSNTW + "/PausableSubscriptionManager/PauseSubscriptionRequest"
A_PAUSE_RESP = WSNTW + "/PausableSubscriptionManager/PauseSubscriptionResponse"
A_RESUME = WSNTW + "/PausableSubscriptionManager/ResumeSubscriptionRequest"
A_RESUME_RESP = WSNTW + "/PausableSubscriptionManager/ResumeSubscriptionResponse"
A_REGISTER = BRW + "/RegisterPublisher/RegisterPublisherRequest"
A_REGISTER_RESP = BRW + "/RegisterPublisher/RegisterPublisherResponse"
A_DESTROY_REG = BRW + "/PublisherRegistrationManager/DestroyRegistrationRequest"
A_DESTROY_REG_RESP = BRW + "/PublisherRegistrationManager/DestroyRegistrationResponse"
A_GET_RP = WSRF_RPW + "/GetResourceProperty/GetResourcePropertyRequest"
A_GET_RP_RESP = WSRF_RPW + "/GetResourceProperty/GetResourcePropertyResponse"
A_SET_TT = WSRF_RLW + "/ScheduledResourceTermination/SetTerminationTimeRequest"
A_SET_TT_RESP = WSRF_RLW + "/ScheduledResourceTermination/SetTerminationTimeResponse"
A_DESTROY = WSRF_RLW + "/ImmediateResourceTermination/DestroyRequest"
A_DESTROY_RESP = WSRF_RLW + "/ImmediateResourceTermination/DestroyResponse"
