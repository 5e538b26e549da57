"""Credentials for management operations (HTTP Basic or bearer token)."""

from __future__ import annotations

import base64

from gwtest import BR, WSA, WSNT, call, notify_body, reading, subscribe_body


def basic(user: str, pw: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()}


async def test_management_operations_need_credentials(make_gateway, consumer):
    gw = await make_gateway(auth_user="admin", auth_password="s3cret", auth_token="tok-123")
    # open operations: Subscribe, Notify, CreatePullPoint, GetMessages, GetResourceProperty
    r = await call(gw.url, subscribe_body(consumer.url))
    assert r.status == 200
    sub = r.body.findtext(f"{{{WSNT}}}SubscriptionReference/{{{WSA}}}Address")
    assert (await call(gw.url, notify_body(("tns:t", reading(1))))).status == 202
    r = await call(gw.url, "<wsnt:CreatePullPoint/>")
    pp = r.body.findtext(f"{{{WSNT}}}PullPoint/{{{WSA}}}Address")
    assert (await call(pp, "<wsnt:GetMessages/>")).status == 200
    assert (
        await call(sub, "<rp:GetResourceProperty>wsnt:CreationTime</rp:GetResourceProperty>")
    ).status == 200
    # management operations
    manage = [
        (sub, "<wsnt:Renew><wsnt:TerminationTime>PT5M</wsnt:TerminationTime></wsnt:Renew>"),
        (sub, "<wsnt:PauseSubscription/>"),
        (sub, "<wsnt:ResumeSubscription/>"),
        (pp, "<wsnt:DestroyPullPoint/>"),
        (gw.url, "<br:RegisterPublisher/>"),
    ]
    for url, body in manage:
        r = await call(url, body)
        assert r.status == 401, body
        assert (
            "Basic" in r.headers["WWW-Authenticate"] and "Bearer" in r.headers["WWW-Authenticate"]
        )
        r = await call(url, body, http_headers=basic("admin", "wrong"))
        assert r.status == 401
        r = await call(url, body, http_headers={"Authorization": "Bearer nope"})
        assert r.status == 401
    for i, (url, body) in enumerate(manage):
        hdr = basic("admin", "s3cret") if i % 2 else {"Authorization": "Bearer tok-123"}
        r = await call(url, body, http_headers=hdr)
        assert r.status == 200, (body, r.text)
    reg = r.body.findtext(f"{{{BR}}}PublisherRegistrationReference/{{{WSA}}}Address")
    assert (await call(reg, "<br:DestroyRegistration/>")).status == 401
    assert (await call(sub, "<wsnt:Unsubscribe/>")).status == 401
    r = await call(sub, "<wsnt:Unsubscribe/>", http_headers={"Authorization": "Bearer tok-123"})
    assert r.status == 200


async def test_no_credentials_configured_means_open(gw, consumer):
    r = await call(gw.url, subscribe_body(consumer.url))
    sub = r.body.findtext(f"{{{WSNT}}}SubscriptionReference/{{{WSA}}}Address")
    assert (await call(sub, "<wsnt:Unsubscribe/>")).status == 200
