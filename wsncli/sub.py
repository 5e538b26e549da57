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

It rides out a broker that goes away and comes back (a restart, an outage), as
`mosquitto_sub` does: while the broker cannot be reached (refused, timed out, reset, 502/503/
504) it tries again, 1 s after the first failure, doubling to RETRY_MAX, keeping its pull
point and subscription (a broker that keeps them, as wsn-edge does, delivers what came
meanwhile); one line on stderr when the broker is lost, one when it answers again. When
the broker answers that the pull point or subscription is gone (ResourceUnknownFault: it
expired meanwhile, or someone removed it), `wsn sub` makes new ones and goes on, saying so.
Only a failure at the start (no broker there, a refused Subscribe) ends it.
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


#: the longest pause between two attempts to reach a broker that went away (seconds)
RETRY_MAX = 30.0
#: the fault that says a pull point or subscription no longer exists (WS-ResourceFramework)
GONE = "ResourceUnknownFault"


class _Link:
    """What `wsn sub` holds at the broker: its pull point (pull mode) and subscription, made
    again when the broker says they are gone; and the broker's reachability (module
    docstring)."""

    def __init__(
        self, client: Client, opts: SubOptions, done: asyncio.Event, consumer: Epr | None
    ) -> None:
        self.client = client
        self.opts = opts
        self.done = done
        self.consumer = consumer  # push mode: the local consumer; pull mode: None
        self.pp: Epr | None = None
        self.sub: Epr | None = None
        self.generation = 0  # bumped each time they are made again
        self._lock = asyncio.Lock()
        self._down = False
        self._pause = 1.0

    async def establish(self) -> None:
        """CreatePullPoint (pull mode), then Subscribe with it (or the push consumer)."""
        consumer = self.consumer
        if consumer is None:
            try:
                resp = await self.client.call(
                    self.opts.broker, A_CREATE_PP, wsnt("CreatePullPoint")
                )
            except WsnError as e:
                if e.transient or "needs credentials" in str(e):
                    raise
                raise WsnError(
                    f"{e} (without pull points there, try --push HOST:PORT)",
                    e.transient,
                    e.fault,
                ) from None
            self.pp = consumer = _epr_in(resp, "PullPoint", "CreatePullPoint")
        resp = await self.client.call(
            self.opts.broker, A_SUBSCRIBE, subscribe_body(self.opts, consumer)
        )
        self.sub = _epr_in(resp, "SubscriptionReference", "Subscribe")
        self.generation += 1

    async def failed(self, e: WsnError, generation: int) -> None:
        """A request to the pull point or subscription of `generation` failed: wait and
        let the caller try again (the broker is away), make them again (they are gone),
        or raise `e` (anything else)."""
        if e.fault == GONE:
            async with self._lock:
                if generation == self.generation:  # not made again meanwhile
                    what = "pull point" if self.pp is not None else "subscription"
                    print(f"wsn: the {what} is gone at the broker ({e}); subscribing again",
                          file=sys.stderr)  # fmt: skip
                    old = self.sub
                    await self._remake()
                    if old is not None:  # best effort: it may still feed nothing
                        with contextlib.suppress(WsnError):
                            await self.client.call(old, A_UNSUBSCRIBE, wsnt("Unsubscribe"))
            return
        if not e.transient:
            raise e
        await self._away(e)

    async def _remake(self) -> None:
        while not self.done.is_set():
            try:
                await self.establish()
                self.back()
                return
            except WsnError as e:
                if not e.transient:
                    raise
                await self._away(e)

    async def _away(self, e: WsnError) -> None:
        if not self._down:
            self._down = True
            print(
                f"wsn: lost the broker: {e}; trying again every {RETRY_MAX:g} s at most "
                "(the pull point and subscription stay there)",
                file=sys.stderr,
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.done.wait(), self._pause)
        self._pause = min(RETRY_MAX, self._pause * 2)

    def back(self) -> None:
        """A request went through: the broker answers again."""
        if self._down:
            self._down = False
            print(f"wsn: the broker at {self.opts.broker} answers again", file=sys.stderr)
        self._pause = 1.0


async def _pull(client: Client, opts: SubOptions, printer: Printer) -> None:
    link = _Link(client, opts, printer.done, None)
    await link.establish()
    try:
        await _until_done(client, opts, link, printer, lambda: _poll(client, opts, link, printer))
    finally:
        await _cleanup(client, link.sub, link.pp)


async def _poll(client: Client, opts: SubOptions, link: _Link, printer: Printer) -> None:
    while not printer.done.is_set():
        gm = wsnt("GetMessages", {"edge": EDGE})
        rem = printer.remaining
        etree.SubElement(gm, q(WSNT, "MaximumNumber")).text = str(min(rem or 100, 100))
        etree.SubElement(gm, q(EDGE, "Wait")).text = f"PT{opts.wait:g}S"
        t0 = time.monotonic()
        pp, generation = link.pp, link.generation
        assert pp is not None
        try:
            resp = await client.call(pp, A_GET_MESSAGES, gm, extra_wait=opts.wait)
        except WsnError as e:
            await link.failed(e, generation)
            continue
        link.back()
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
        link = _Link(client, opts, printer.done, Epr(f"http://{h}:{bound}{path}"))
        await link.establish()
        try:
            await _until_done(client, opts, link, printer, printer.done.wait)
        finally:
            await _cleanup(client, link.sub, None)
    finally:
        await runner.cleanup()


async def _until_done(
    client: Client,
    opts: SubOptions,
    link: _Link,
    printer: Printer,
    receive: Callable[[], Awaitable[object]],
) -> None:
    """Run `receive()` (until it returns or the printer is done) and renew meanwhile."""
    recv = asyncio.ensure_future(receive())
    stop = asyncio.ensure_future(printer.done.wait())
    renewer = asyncio.ensure_future(_renew_loop(client, opts, link))
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


async def _renew_loop(client: Client, opts: SubOptions, link: _Link) -> None:
    """Renew at half the lifetime; a broker away: again after its pause (_Link), until it
    answers; a subscription gone: made again."""
    pause = opts.lifetime / 2
    while True:
        await asyncio.sleep(pause)
        pause = opts.lifetime / 2
        body = wsnt("Renew")
        etree.SubElement(body, q(WSNT, "TerminationTime")).text = f"PT{opts.lifetime:g}S"
        sub, generation = link.sub, link.generation
        assert sub is not None
        try:
            await client.call(sub, A_RENEW, body)
        except WsnError as e:
            if e.fault != GONE and not e.transient:
                print(f"wsn: warning: could not renew the subscription: {e}", file=sys.stderr)
                continue
            await link.failed(e, generation)
            if e.fault != GONE:  # made again, with a fresh lifetime, if it was gone
                pause = min(RETRY_MAX, opts.lifetime / 10)


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
