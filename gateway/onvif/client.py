"""The camera's services, through onvif-zeep-async (the ONVIF client Home Assistant uses):
device discovery, the event service's capabilities and topic set, pull point and Notify
subscriptions, Renew, Unsubscribe, PullMessages. WS-Security UsernameToken digests,
SOAP 1.2, WS-Addressing and the official WSDL bindings are the library's; this module
only chooses the calls and turns answers and failures into plain values
(`Granted`, `Pulled`) and three exceptions (`Unreachable`, `Refused`, `Gone`).

The library's zeep objects are not handed on: what the camera sent in NotificationMessages
and TopicSets is read from the answer's XML (captured with a zeep plugin), because zeep's
objects lose the namespace declarations the topic texts need (gateway.onvif.messages).

onvif-zeep-async is an optional dependency (the `onvif` extra): it is imported on first
use, and a missing one is a clear error naming the extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import urlsplit

from gateway.wire.xmlutil import Element, parse_datetime

from .config import CameraConfig
from .messages import notification_messages

log = logging.getLogger("gateway.onvif")

EVENTS_NS = "http://www.onvif.org/ver10/events/wsdl"
WSRF_R = "http://docs.oasis-open.org/wsrf/r-2"
TER = "http://www.onvif.org/ver10/error"
S12 = "http://www.w3.org/2003/05/soap-envelope"
TEV = EVENTS_NS
WSTOP = "http://docs.oasis-open.org/wsn/t-1"
#: port types under which the subscription managers are registered with the library
#: (any distinct key of ONVIFCamera.xaddrs works; these name what they are)
PULL = "PullPointSubscription"
PUSH = "NotificationConsumer"

T = TypeVar("T")


class CameraError(Exception):
    """A failed exchange with a camera; str() says what happened, for the operator."""


class Unreachable(CameraError):
    """No answer (connection refused, timeout, HTTP error without SOAP), or a Receiver fault
    to a subscription's operation: try again later, the subscription may still exist."""


class Refused(CameraError):
    """The camera answered with a fault (`sender`: the request was at fault, e.g.
    NotAuthorized or an exhausted pull point pool)."""

    def __init__(self, message: str, subcode: str | None, sender: bool) -> None:
        super().__init__(message)
        self.subcode = subcode
        self.sender = sender


class Gone(Refused):
    """The subscription addressed does not exist (anymore): ResourceUnknownFault or HTTP 404.
    (Cameras answer an unknown subscription in other ways too; those are Refused, and the
    source's Unsubscribe that follows finds out, so a slot is never taken for gone.)"""


class Missing(CameraError):
    """onvif-zeep-async is not installed."""


def onvif_module() -> Any:
    """`onvif` (onvif-zeep-async), imported without its import-time side effect:
    `onvif.client` calls logging.basicConfig(INFO), which would turn on INFO logging of
    every library in a process that configured none."""
    loaded = sys.modules.get("onvif")
    if loaded is not None:
        return loaded
    root = logging.getLogger()
    guard = None if root.handlers else logging.NullHandler()
    if guard is not None:
        root.addHandler(guard)
    try:
        return importlib.import_module("onvif")
    except ModuleNotFoundError as e:
        raise Missing("ONVIF cameras need onvif-zeep-async: pip install 'wsn-edge[onvif]'") from e
    finally:
        if guard is not None:
            root.removeHandler(guard)


@dataclass(frozen=True)
class Granted:
    """A subscription the camera made or renewed (WS-BaseNotification 1.3 §4.2, §6.1.1)."""

    address: str  # the SubscriptionReference address (unchanged by Renew)
    current: datetime | None
    termination: datetime | None


@dataclass(frozen=True)
class Pulled:
    """A PullMessagesResponse: the camera's times and the raw NotificationMessages."""

    current: datetime | None
    termination: datetime | None
    messages: list[Element]


def _aware(t: Any) -> datetime | None:
    if not isinstance(t, datetime):
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def _capture() -> Any:
    """A zeep plugin keeping the last answer's XML (one exchange at a time per service)."""
    from zeep.plugins import Plugin

    class Capture(Plugin):  # type: ignore[misc]
        def __init__(self) -> None:
            self.doc: Element | None = None

        def ingress(self, envelope: Element, http_headers: Any, operation: Any) -> Any:
            self.doc = envelope
            return envelope, http_headers

    return Capture()


def _body_child(doc: Element | None, tag: str) -> Element | None:
    if doc is None:
        return None
    body = doc.find(f"{{{S12}}}Body")
    if body is None:
        body = doc.find("{http://schemas.xmlsoap.org/soap/envelope/}Body")
    return body.find(tag) if body is not None else None


class CameraClient:
    """One connection to one camera: made by `open` (discovery), closed by `close`.
    Every call raises Unreachable, Refused or Gone (a Refused subclass) on failure;
    `timeout` bounds each exchange but PullMessages (its own long poll plus `timeout`)."""

    def __init__(self, cfg: CameraConfig, camera: Any, timeout: float) -> None:
        self.cfg = cfg
        self._camera = camera
        self.timeout = timeout
        #: the camera's clock minus ours (GetSystemDateAndTime), when it told us
        self.skew: timedelta | None = camera.dt_diff
        self.event_service: str = camera.xaddrs.get(EVENTS_NS, "")
        #: tev:Capabilities/@WSPullPointSupport (None: the camera did not say)
        self.pullpoint: bool | None = None
        self._events: Any = None
        self._captures: dict[str, Any] = {}

    # ------------------------------------------------------------------ connect
    @classmethod
    async def open(cls, cfg: CameraConfig, timeout: float = 10.0) -> CameraClient:
        """Discovery: the device service's GetServices (GetCapabilities on older cameras)
        finds the event service; GetSystemDateAndTime gives the clock skew the WS-Security
        timestamps are corrected by; the event service's GetServiceCapabilities (or the
        device's GetCapabilities) says whether it has pull points."""
        onvif = onvif_module()
        url = urlsplit(cfg.address)
        port = url.port or (443 if url.scheme == "https" else 80)
        host = f"{url.scheme}://{url.hostname}" if url.scheme == "https" else url.hostname
        camera = onvif.ONVIFCamera(
            host, port, cfg.user, cfg.password, adjust_time=True, no_cache=True
        )
        try:
            await _call(camera.update_xaddrs(), timeout, "discovery (GetServices)")
            client = cls(cfg, camera, timeout)
            if not client.event_service:
                raise Refused(
                    "the camera has no event service (neither GetServices nor "
                    "GetCapabilities names one)",
                    None,
                    False,
                )
            client._events = await _call(camera.create_events_service(), timeout, "events")
            client._events.zeep_client.plugins.append(cap := _capture())
            client._captures["events"] = cap
            await client._read_capabilities()
            return client
        except BaseException:
            with contextlib.suppress(Exception):
                await camera.close()
            raise

    async def _read_capabilities(self) -> None:
        try:
            caps = await _call(self._events.GetServiceCapabilities(), self.timeout, "caps")
            v = getattr(caps, "WSPullPointSupport", None)
            self.pullpoint = bool(v) if v is not None else None
            return
        except Refused:
            pass  # an older camera: the device service's GetCapabilities tells
        with contextlib.suppress(Refused, Unreachable):
            caps = await _call(self._camera.get_capabilities(), self.timeout, "GetCapabilities")
            ev = (caps or {}).get("Events") or {}
            v = ev.get("WSPullPointSupport")
            self.pullpoint = bool(v) if v is not None else None

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._camera.close()

    # ------------------------------------------------------------------ event service
    async def event_properties(self) -> Element | None:
        """The wstop:TopicSet of GetEventProperties (as the camera wrote it), or None."""
        await _call(self._events.GetEventProperties(), self.timeout, "GetEventProperties")
        resp = _body_child(self._captures["events"].doc, f"{{{TEV}}}GetEventPropertiesResponse")
        return resp.find(f"{{{WSTOP}}}TopicSet") if resp is not None else None

    async def create_pullpoint(self, itt: str) -> Granted:
        r = await _call(
            self._events.CreatePullPointSubscription({"InitialTerminationTime": itt}),
            self.timeout,
            "CreatePullPointSubscription",
        )
        return _granted(r)

    async def subscribe(self, consumer: str, itt: str) -> Granted:
        """WS-BaseNotification 1.3 §4.2 Subscribe, no filter: every event, pushed to
        `consumer` as Notify."""
        svc = await _call(self._camera.create_notification_service(), self.timeout, "Subscribe")
        r = await _call(
            svc.Subscribe(
                {"ConsumerReference": {"Address": consumer}, "InitialTerminationTime": itt}
            ),
            self.timeout,
            "Subscribe",
        )
        return _granted(r)

    # ------------------------------------------------------------------ subscription
    async def _manager(self, address: str, kind: str) -> Any:
        self._camera.xaddrs[f"{EVENTS_NS}/{kind}"] = address
        return await _call(
            self._camera.create_subscription_service(kind), self.timeout, "subscription manager"
        )

    async def renew(self, address: str, kind: str, tt: str) -> Granted:
        mgr = await self._manager(address, kind)
        r = await _call(mgr.Renew({"TerminationTime": tt}), self.timeout, "Renew", address)
        return Granted(address, _aware(r.CurrentTime), _aware(r.TerminationTime))

    async def unsubscribe(self, address: str, kind: str) -> None:
        mgr = await self._manager(address, kind)
        await _call(mgr.Unsubscribe(), self.timeout, "Unsubscribe", address)

    async def synchronize(self, address: str) -> None:
        """SetSynchronizationPoint (ONVIF events.wsdl): the camera sends the current state of
        every property topic again (PropertyOperation Initialized), to a pull point or as
        Notify, whichever the subscription at `address` is."""
        self._camera.xaddrs[f"{EVENTS_NS}/{PULL}"] = address
        svc = await _call(self._camera.create_pullpoint_service(), self.timeout, "pull point")
        await _call(svc.SetSynchronizationPoint(), self.timeout, "SetSynchronizationPoint", address)

    async def pull(self, address: str, wait: float, limit: int) -> Pulled:
        """PullMessages (ONVIF events.wsdl): at most `limit` messages, waiting up to `wait`
        seconds for the first one."""
        self._camera.xaddrs[f"{EVENTS_NS}/{PULL}"] = address
        svc = await _call(self._camera.create_pullpoint_service(), self.timeout, "pull point")
        cap = self._captures.get(address)
        if cap is None or cap not in svc.zeep_client.plugins:
            svc.zeep_client.plugins.append(cap := _capture())
            self._captures = {k: v for k, v in self._captures.items() if k == "events"}
            self._captures[address] = cap
        cap.doc = None
        req = {"Timeout": timedelta(seconds=max(0.0, wait)), "MessageLimit": limit}
        tag = f"{{{TEV}}}PullMessagesResponse"
        try:
            await _call(svc.PullMessages(req), wait + self.timeout, "PullMessages", address)
        except Unreachable:
            # zeep could not make objects of an answer that did arrive (a camera's odd
            # payload): the XML is read, not lost; anything else is the failure it was
            resp = _body_child(cap.doc, tag)
            if resp is None:
                raise
        else:
            resp = _body_child(cap.doc, tag)
            if resp is None:
                raise Unreachable("PullMessages: the answer is not a PullMessagesResponse")

        def when(local: str) -> datetime | None:
            text = resp.findtext(f"{{{TEV}}}{local}")
            with contextlib.suppress(ValueError, TypeError):
                return parse_datetime(text or "")
            return None

        return Pulled(when("CurrentTime"), when("TerminationTime"), notification_messages(resp))


def _granted(r: Any) -> Granted:
    try:
        address = str(r.SubscriptionReference.Address._value_1).strip()
    except AttributeError:
        raise Refused("the answer has no SubscriptionReference address", None, False) from None
    if not address:
        raise Refused("the answer's SubscriptionReference address is empty", None, False)
    return Granted(address, _aware(r.CurrentTime), _aware(r.TerminationTime))


async def _call(aw: Awaitable[T], timeout: float, what: str, address: str = "") -> T:
    """Await one exchange, turning the library's and zeep's failures into ours."""
    import aiohttp

    onvif = onvif_module()
    from zeep import exceptions as zx

    try:
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the result of an
        # exchange that completed in the same turn as a cancel of the task, swallowing the
        # cancel (CPython gh-86296, fixed in 3.12); a camera source cancelled at that moment
        # went on pulling for ever, and a gateway stop could not end it
        async with asyncio.timeout(timeout):
            return await aw
    except zx.Fault as f:
        subcodes = [getattr(s, "localname", str(s)) for s in (getattr(f, "subcodes", None) or [])]
        code = str(getattr(f, "code", "") or "")
        sender = "Sender" in code or "Client" in code or not code
        sub = subcodes[0] if subcodes else None
        msg = f"{what}: {f.message or 'fault'}" + (f" ({sub})" if sub else "")
        if address and sub == "ResourceUnknownFault":
            raise Gone(msg, sub, sender) from None
        if address and not sender:  # the camera's trouble, not the subscription's: retried
            raise Unreachable(msg) from None
        raise Refused(msg, sub, sender) from None
    except zx.TransportError as e:
        status = getattr(e, "status_code", 0) or 0
        if address and status == 404:
            raise Gone(f"{what}: HTTP 404 for the subscription", None, True) from None
        raise Unreachable(f"{what}: HTTP {status}: {str(e)[:200]}") from None
    except (TimeoutError, aiohttp.ClientError, OSError) as e:
        raise Unreachable(f"{what}: {type(e).__name__}: {e}") from None
    except (zx.XMLSyntaxError, zx.XMLParseError, zx.ValidationError, ValueError) as e:
        raise Unreachable(f"{what}: unreadable answer: {e}") from None
    except onvif.ONVIFError as e:
        cause = e.__cause__
        if isinstance(cause, zx.Fault):
            raise Refused(f"{what}: {cause.message}", None, True) from None
        raise Unreachable(f"{what}: {e}") from None


Connect = Callable[[CameraConfig], Awaitable[CameraClient]]
