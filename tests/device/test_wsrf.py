"""The device's pull points and subscriptions as WS-Resources, over HTTP, as a spec-following
client sees them (issue 26): a pull point "MUST support the immediate termination interface"
(WS-BaseNotification 1.3 §5.1) and keeps only notifications (§5.1.1); a subscription's
resource properties are "as defined in the description of the Subscribe request message"
(§6.4.1). Expected actions come from the WSDL (tests/wsdl_actions.py)."""

from __future__ import annotations

from devtest import WSA, WSNT, Client, body_child, fault_name, header_action, parse

from tests.wsdl_actions import action

RL = "http://docs.oasis-open.org/wsrf/rl-2"
DESTROY = f'<wsrf-rl:Destroy xmlns:wsrf-rl="{RL}"/>'
GRP = (
    '<wsrf-rp:GetResourceProperty xmlns:wsrf-rp="http://docs.oasis-open.org/wsrf/rp-2" '
    f'xmlns:wsrf-rl="{RL}">{{}}</wsrf-rp:GetResourceProperty>'
)


async def _pullpoint(client: Client) -> str:
    st, data = await client.soap("<wsnt:CreatePullPoint/>")
    assert st == 200, data
    addr = body_child(parse(data)).findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address")
    assert addr
    return addr


async def _messages(client: Client, pp: str) -> int:
    st, data = await client.soap("<wsnt:GetMessages/>", pp)
    assert st == 200, data
    return len(body_child(parse(data)).findall(f"{{{WSNT}}}NotificationMessage"))


async def test_destroy_ends_a_pull_point(client: Client) -> None:
    pp = await _pullpoint(client)
    st, data = await client.soap(DESTROY, pp)
    assert st == 200, data
    assert body_child(parse(data)).tag == f"{{{RL}}}DestroyResponse"
    assert header_action(data) == action("ImmediateResourceTermination", "Destroy", "output")
    st, data = await client.soap("<wsnt:GetMessages/>", pp)
    assert fault_name(data) == "ResourceUnknownFault"
    assert (await client.status())["pullpoints"] == 0


async def test_a_pull_point_keeps_only_notifications(client: Client) -> None:
    pp = await _pullpoint(client)
    st, data = await client.soap(GRP.format("wsrf-rl:CurrentTime"), pp)
    assert st == 400 and fault_name(data) == "InvalidResourcePropertyQNameFault", data
    st, data = await client.soap("<wsnt:Renew/>", pp)
    assert st == 400 and fault_name(data) == "ActionNotSupported", data
    assert await _messages(client, pp) == 0


async def test_subscription_properties_are_what_subscribe_sent(client: Client) -> None:
    body = (
        "<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>http://127.0.0.1:9/c</wsa:Address>"
        '<wsa:ReferenceParameters><x:Key xmlns:x="urn:x">k1</x:Key></wsa:ReferenceParameters>'
        "</wsnt:ConsumerReference></wsnt:Subscribe>"
    )
    st, data = await client.soap(body)
    assert st == 200, data
    sub = body_child(parse(data)).findtext(f"{{{WSNT}}}SubscriptionReference/{{{WSA}}}Address")
    assert sub
    st, data = await client.soap(GRP.format("wsnt:ConsumerReference"), sub)
    assert st == 200, data
    cr = body_child(parse(data)).find(f"{{{WSNT}}}ConsumerReference")
    assert cr is not None
    assert cr.findtext(f"{{{WSA}}}Address") == "http://127.0.0.1:9/c"
    key = cr.find(f"{{{WSA}}}ReferenceParameters/{{urn:x}}Key")
    assert key is not None and key.text == "k1"
    # none sent: none there (minOccurs 0), not an empty element
    for prop in ("wsnt:SubscriptionPolicy", "wsnt:Filter"):
        st, data = await client.soap(GRP.format(prop), sub)
        assert st == 200 and len(body_child(parse(data))) == 0, data
