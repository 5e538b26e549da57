"""`wsn sub`: subscribe and print every notification as it arrives.

Pull mode (default, works from behind NAT): CreatePullPoint at the broker
(WS-BrokeredNotification 1.3 / WS-BaseNotification 1.3 §5.2), Subscribe with the pull
point as ConsumerReference (§4.2), then GetMessages (§5.1.1) in a loop. Each GetMessages
carries `edge:Wait` (wsn-edge's long poll; the schema lets any broker ignore an element of
another namespace there), and when a broker answers an empty GetMessages at once, the next
one waits `--interval` seconds, so no broker is polled in a busy loop.

Push mode (`--push HOST:PORT`): a local NotificationConsumer on HOST:PORT, subscribed as
`http://HOST:PORT/wsn-cli/<random>`; it answers each Notify with 202.

Either way the subscription asks for `--lifetime` and is renewed (§6.1 Renew) at half of
it, and on `--count`, Ctrl-C or SIGTERM it is cleaned up: Unsubscribe (§6.3), then
DestroyPullPoint (§5.1.4). A clean-up step that fails is reported on stderr, one line each.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web
from lxml import etree

from wsncli import messages
from wsncli.wsp import (
    A_CREATE_PP,
    A_DESTROY_PP,
    A_GET_MESSAGES,
    A_RENEW,
    A_SUBSCRIBE,
    A_UNSUBSCRIBE,
    DIALECTS,
    EDGE,
    SOAP11,
    SOAP12,
    WSNT,
    XPATH_DIALECT,
    Client,
    Epr,
    WsnError,
    expression,
    q,
    wsnt,
)

_PREFIX = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*):(?!:)")


@dataclass
class SubOptions:
    broker: str
    topic: str
    dialect: str = "concrete"
    nsmap: dict[str, str] = field(default_factory=dict)
    content_filter: str | None = None
    raw: bool = False
    count: int | None = None
    json: bool = False
    push: str | None = None
    lifetime: float = 600.0
    wait: float = 20.0
    interval: float = 1.0


def check_prefixes(text: str, dialect: str, nsmap: dict[str, str]) -> None:
    """Refuse before sending what the broker would refuse: a prefix without --ns."""
    if dialect == "xpath":
        return  # XPath has axes (child::) and functions: the broker judges it
    for p in _PREFIX.findall(text):
        if p not in nsmap:
            raise WsnError(
                f"prefix {p!r} in topic expression {text!r} is not declared: "
                f"add --ns {p}=NAMESPACE-URI"
            )


def subscribe_body(opts: SubOptions, consumer: Epr) -> etree._Element:
    sub = wsnt("Subscribe")
    sub.append(consumer.to_element(q(WSNT, "ConsumerReference")))
    flt = etree.SubElement(sub, q(WSNT, "Filter"))
    flt.append(
        expression(q(WSNT, "TopicExpression"), DIALECTS[opts.dialect], opts.topic, opts.nsmap)
    )
    if opts.content_filter:
        flt.append(
            expression(q(WSNT, "MessageContent"), XPATH_DIALECT, opts.content_filter, opts.nsmap)
        )
    itt = etree.SubElement(sub, q(WSNT, "InitialTerminationTime"))
    itt.text = f"PT{opts.lifetime:g}S"
    if opts.raw:
        pol = etree.SubElement(sub, q(WSNT, "SubscriptionPolicy"))
        etree.SubElement(pol, q(WSNT, "UseRaw"))
    return sub


def _epr_in(resp: etree._Element | None, local: str, op: str) -> Epr:
    el = resp.find(q(WSNT, local)) if resp is not None else None
    if el is None:
        raise WsnError(f"the {op} answer has no wsnt:{local}")
    return Epr.parse(el)


class Printer:
    """Prints notifications until `count` is reached; then sets `done`."""

    def __init__(self, opts: SubOptions, done: asyncio.Event) -> None:
        self.opts = opts
        self.done = done
        self.printed = 0

    @property
    def remaining(self) -> int | None:
        return None if self.opts.count is None else max(0, self.opts.count - self.printed)

    def emit(self, ns: list[messages.Notification]) -> None:
        for n in ns:
            if self.done.is_set():
                return
            try:
                print(n.json() if self.opts.json else n.line(), flush=True)
            except BrokenPipeError:  # `wsn sub ... | head`: the reader is gone
                self.done.set()
                return
            self.printed += 1
            if self.remaining == 0:
                self.done.set()


async def run(client: Client, opts: SubOptions) -> int:
    check_prefixes(opts.topic, opts.dialect, opts.nsmap)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, done.set)
    printer = Printer(opts, done)
    if opts.push:
        await _push(client, opts, printer)
    else:
        await _pull(client, opts, printer)
    return 0


async def _pull(client: Client, opts: SubOptions, printer: Printer) -> None:
    try:
        resp = await client.call(opts.broker, A_CREATE_PP, wsnt("CreatePullPoint"))
    except WsnError as e:
        if "cannot connect" in str(e) or "needs credentials" in str(e):
            raise
        raise WsnError(f"{e} (without pull points there, try --push HOST:PORT)") from None
    pp = _epr_in(resp, "PullPoint", "CreatePullPoint")
    sub: Epr | None = None
    try:
        resp = await client.call(opts.broker, A_SUBSCRIBE, subscribe_body(opts, pp))
        sub = _epr_in(resp, "SubscriptionReference", "Subscribe")
        await _until_done(client, opts, sub, printer, lambda: _poll(client, opts, pp, printer))
    finally:
        await _cleanup(client, sub, pp)


async def _poll(client: Client, opts: SubOptions, pp: Epr, printer: Printer) -> None:
    while not printer.done.is_set():
        gm = wsnt("GetMessages", {"edge": EDGE})
        rem = printer.remaining
        etree.SubElement(gm, q(WSNT, "MaximumNumber")).text = str(min(rem or 100, 100))
        etree.SubElement(gm, q(EDGE, "Wait")).text = f"PT{opts.wait:g}S"
        t0 = time.monotonic()
        resp = await client.call(pp, A_GET_MESSAGES, gm, extra_wait=opts.wait)
        got = messages.notifications(resp) if resp is not None else []
        printer.emit(got)
        if not got and time.monotonic() - t0 < opts.interval:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(printer.done.wait(), opts.interval)


async def _push(client: Client, opts: SubOptions, printer: Printer) -> None:
    host, _, port_s = opts.push.rpartition(":") if opts.push else ("", "", "")
    try:
        port = int(port_s)
    except ValueError:
        port = -1
    if not host or not 0 <= port < 65536:
        raise WsnError(f"--push {opts.push!r}: expected HOST:PORT, e.g. --push 127.0.0.1:8099")
    path = f"/wsn-cli/{secrets.token_hex(8)}"

    async def handle(request: web.Request) -> web.StreamResponse:
        data = await request.read()
        try:
            root = etree.fromstring(data, etree.XMLParser(resolve_entities=False, no_network=True))
        except etree.XMLSyntaxError:
            return web.Response(status=400, text="not XML\n")
        body = root.find(q(SOAP12, "Body"))
        if body is None:
            body = root.find(q(SOAP11, "Body"))
        kids = [c for c in body if isinstance(c.tag, str)] if body is not None else []
        if kids and kids[0].tag == q(WSNT, "Notify"):
            printer.emit(messages.notifications(kids[0]))
        elif kids:  # UseRaw: the payload is the body
            printer.emit([messages.parse(kids[0])])
        return web.Response(status=202)

    app = web.Application()
    app.router.add_post(path, handle)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host.strip("[]"), port)
        try:
            await site.start()
        except OSError as e:
            raise WsnError(f"--push {opts.push}: cannot listen there: {e.strerror or e}") from None
        socks = getattr(site._server, "sockets", None) or []
        bound = int(socks[0].getsockname()[1]) if socks else port
        h = f"[{host.strip('[]')}]" if ":" in host.strip("[]") else host
        consumer = Epr(f"http://{h}:{bound}{path}")
        sub: Epr | None = None
        try:
            resp = await client.call(opts.broker, A_SUBSCRIBE, subscribe_body(opts, consumer))
            sub = _epr_in(resp, "SubscriptionReference", "Subscribe")
            await _until_done(client, opts, sub, printer, printer.done.wait)
        finally:
            await _cleanup(client, sub, None)
    finally:
        await runner.cleanup()


async def _until_done(
    client: Client,
    opts: SubOptions,
    sub: Epr,
    printer: Printer,
    receive: Callable[[], Awaitable[object]],
) -> None:
    """Run `receive()` (until it returns or the printer is done) and renew meanwhile."""
    recv = asyncio.ensure_future(receive())
    stop = asyncio.ensure_future(printer.done.wait())
    renewer = asyncio.ensure_future(_renew_loop(client, opts, sub))
    try:
        await asyncio.wait([recv, stop], return_when=asyncio.FIRST_COMPLETED)
        if recv.done():
            recv.result()  # a WsnError of the receive loop ends `wsn sub` with it
    finally:
        for t in (recv, stop, renewer):
            t.cancel()
        for t in (recv, stop, renewer):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t


async def _renew_loop(client: Client, opts: SubOptions, sub: Epr) -> None:
    while True:
        await asyncio.sleep(opts.lifetime / 2)
        body = wsnt("Renew")
        etree.SubElement(body, q(WSNT, "TerminationTime")).text = f"PT{opts.lifetime:g}S"
        try:
            await client.call(sub, A_RENEW, body)
        except WsnError as e:
            print(f"wsn: warning: could not renew the subscription: {e}", file=sys.stderr)


async def _cleanup(client: Client, sub: Epr | None, pp: Epr | None) -> None:
    steps: list[tuple[str, Epr, str, str]] = []
    if sub is not None:
        steps.append(("Unsubscribe", sub, A_UNSUBSCRIBE, "the subscription"))
    if pp is not None:
        steps.append(("DestroyPullPoint", pp, A_DESTROY_PP, "the pull point"))
    for local, epr, action, what in steps:
        try:
            await client.call(epr, action, wsnt(local))
        except WsnError as e:
            print(f"wsn: warning: {what} at {epr.address} is left behind: {e}", file=sys.stderr)
