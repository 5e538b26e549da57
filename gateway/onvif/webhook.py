"""The gateway's Notify endpoint for cameras without pull points (WS-BaseNotification 1.3
§3: the camera is the NotificationProducer, this endpoint its NotificationConsumer).

``POST {base}/{camera id}/{token}``: the token is a fresh secret per subscription
(gateway.onvif.source), so only the camera it was given to can post there, and a
subscription the gateway gave up (an old token) is answered 404, which tells a camera that
keeps pushing to drop it. The body is read with the hardened parser (no DTD, no entities,
gateway.wire.xmlutil) up to `max_bytes`; a Notify is answered 202 once its events are
handed to the sink. Not SOAP or not a Notify: 400 with the reason.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from gateway.wire.xmlutil import XmlRejected, parse_xml

from .source import CameraSource

S11 = "http://schemas.xmlsoap.org/soap/envelope/"
S12 = "http://www.w3.org/2003/05/soap-envelope"
WSNT = "http://docs.oasis-open.org/wsn/b-2"
#: the path under the gateway's address (the mount point of `routes`)
PATH = "/onvif/notify"


def routes(
    lookup: Callable[[str], CameraSource | None], max_bytes: int = 1024 * 1024, path: str = PATH
) -> list[web.RouteDef]:
    """aiohttp routes for the endpoint; `lookup` finds a camera source by id."""

    async def notify(request: web.Request) -> web.Response:
        source = lookup(request.match_info["camera"])
        if source is None:
            raise web.HTTPNotFound(text="no such camera")
        if request.content_length is not None and request.content_length > max_bytes:
            raise web.HTTPRequestEntityTooLarge(
                max_size=max_bytes, actual_size=request.content_length
            )
        data = bytearray()
        async for chunk in request.content.iter_chunked(64 * 1024):
            data += chunk
            if len(data) > max_bytes:
                raise web.HTTPRequestEntityTooLarge(max_size=max_bytes, actual_size=len(data))
        try:
            root = parse_xml(bytes(data))
        except XmlRejected as e:
            raise web.HTTPBadRequest(text=str(e)) from None
        body = root.find(f"{{{S12}}}Body")
        if body is None:
            body = root.find(f"{{{S11}}}Body")
        notify_el = body.find(f"{{{WSNT}}}Notify") if body is not None else None
        if notify_el is None:
            raise web.HTTPBadRequest(text="expected a SOAP envelope with a wsnt:Notify body")
        if not await source.accept_notify(request.match_info["token"], notify_el):
            raise web.HTTPNotFound(text="no such subscription (it ended)")
        return web.Response(status=202)

    return [web.post(path + "/{camera}/{token}", notify)]
