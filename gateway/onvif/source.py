"""One camera as an event source: connect, read its topic set, subscribe, keep the
subscription alive, hand every event to the sink; after any loss, start over with backoff.

The cycle (`CameraSource.run`), each step's failure ending the cycle:

1. discovery and GetEventProperties (gateway.onvif.client); the topic set goes to the sink;
2. first, Unsubscribe the subscription a previous cycle (or a previous gateway process,
   from the state file) may have left at the camera: a camera has few pull point slots
   and we never hold two;
3. a pull point (CreatePullPointSubscription) when the camera has them and the mode allows,
   else Subscribe with a Notify endpoint of this gateway (an unguessable URL per
   subscription: a Notify to an old or made-up one is refused);
4. pull (PullMessages, long poll) or wait for Notify; renew at half the granted lifetime.

A camera that does not answer for a while keeps its subscription: the source retries the
same one until it would have expired (a Wi-Fi hiccup costs no slot). A subscription the
camera no longer knows (ResourceUnknownFault or another Sender fault, as after a reboot)
ends the cycle at once; the next one starts after the backoff, which resets only once a
subscription has worked (a pull answered, a renewal or Notify arrived): a camera that
accepts subscriptions but never serves them is retried ever more slowly, never in a storm.
Times follow gateway.onvif.timing (skew-proof grants; absolute times for cameras that
mistreat durations).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from gateway.wire.xmlutil import Element, format_datetime, parse_datetime, utcnow

from . import messages, model, timing
from .client import PULL, PUSH, CameraClient, CameraError, Connect, Gone, Refused, Unreachable
from .config import CameraConfig

log = logging.getLogger("gateway.onvif")

UNREACHABLE = "unreachable"  # subscribed, but the camera does not answer (status state)


@dataclass
class _Sub:
    address: str
    kind: str  # client.PULL | client.PUSH


class CameraSource:
    """See the module docstring. `start()` runs the cycle in a task, `stop()` ends it and
    unsubscribes (best effort, within `timeout`). `status` is live."""

    def __init__(
        self,
        cfg: CameraConfig,
        sink: model.EventSink,
        *,
        notify_base: str | None = None,
        state_dir: Path | None = None,
        connect: Connect | None = None,
        backoff_initial: float = 1.0,
        backoff_max: float = 60.0,
        renew_fraction: float = 0.5,
        timeout: float = 10.0,
        mono: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = utcnow,
    ) -> None:
        self.cfg = cfg
        self.sink = sink
        self.notify_base = notify_base.rstrip("/") if notify_base else None
        self.state_file = state_dir / f"{cfg.id}.json" if state_dir is not None else None
        self._connect: Connect = connect or (lambda c: CameraClient.open(c, timeout))
        self.backoff = timing.Backoff(backoff_initial, backoff_max)
        self.renew_fraction = renew_fraction
        self.timeout = timeout
        self._mono = mono
        self._wall = wall
        self.status = model.CameraStatus(cfg.id, cfg.address, cfg.mode)
        self._absolute = False
        self._sub: _Sub | None = None
        #: the secret in the path of the current Notify endpoint (gateway.onvif.webhook)
        self._push_token: str | None = None
        self._client: CameraClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._healthy = False
        self._leftover = self._read_state()
        self._skipped_logged: set[str] = set()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self.run(), name=f"onvif camera {self.cfg.id}"
            )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, self.timeout + 5)
        self.status.state = model.STOPPED
        self.status.retry_at = None

    async def run(self) -> None:
        while True:
            gone = False
            try:
                await self._cycle()
            except Gone as e:
                gone = True
                self._error(e)
            except CameraError as e:
                self._error(e)
            except Exception as e:  # a bug or a sink failure: logged, retried, never fatal
                log.exception("camera %s: unexpected failure", self.cfg.id)
                self._error(e)
            finally:
                await self._end_cycle(gone)
            delay = self.backoff.next()
            self.status.state = model.BACKOFF
            self.status.retry_at = self._wall() + timedelta(seconds=delay)
            await asyncio.sleep(delay)

    # ------------------------------------------------------------------ the cycle
    async def _cycle(self) -> None:
        st = self.status
        st.state, st.retry_at, self._healthy = model.CONNECTING, None, False
        client = self._client = await self._connect(self.cfg)
        st.clock_skew = client.skew.total_seconds() if client.skew is not None else None
        await self._release_leftover(client)
        st.state = model.SUBSCRIBING
        try:
            topic_set = await client.event_properties()
        except Refused as e:  # optional in practice: events flow without it
            log.warning("camera %s: GetEventProperties refused: %s", self.cfg.id, e)
            topic_set = None
        found, skipped = messages.read_topic_set(topic_set)
        for why in skipped[:5]:
            log.warning("camera %s: topic set: %s", self.cfg.id, why)
        self.sink.camera_topics(self.cfg.id, found)
        st.topics = len(found)
        kind, lease = await self._subscribe(client, self._choose_mode(client))
        st.state = model.SUBSCRIBED
        assert self._sub is not None
        try:  # the current state of every property, so nothing is missed across a gap
            await client.synchronize(self._sub.address)
        except (Refused, Unreachable) as e:  # optional for cameras; events flow without it
            log.info("camera %s: SetSynchronizationPoint: %s", self.cfg.id, e)
        if kind == PULL:
            await self._pull_loop(client, lease)
        else:
            await self._push_loop(client, lease)

    def _choose_mode(self, client: CameraClient) -> str:
        mode = self.cfg.mode
        if mode == "pullpoint" or (mode == "auto" and client.pullpoint is not False):
            if client.pullpoint is False:
                raise Refused(
                    "the camera has no pull points (WSPullPointSupport=false)", None, False
                )
            return PULL
        if self.notify_base is None:
            raise Refused(
                "the camera has no pull points and this gateway has no address a camera can "
                "post Notify to (--public-url)",
                None,
                False,
            )
        return PUSH

    async def _subscribe(self, client: CameraClient, kind: str) -> tuple[str, timing.Lease]:
        """Subscribe in `kind` (falling back to Notify when `auto` found the camera's pull
        point support unknown and CreatePullPointSubscription refused); -> (kind, lease)."""
        asked = self.cfg.lifetime
        cam_now = self._camera_now(None, client) if self._absolute else None
        itt = timing.request_time(asked, cam_now)
        if kind == PULL:
            try:
                g = await client.create_pullpoint(itt)
            except Refused as e:
                if not (self.cfg.mode == "auto" and client.pullpoint is None and e.sender):
                    raise
                if self.notify_base is None:
                    raise
                log.info("camera %s: no pull point (%s); Notify instead", self.cfg.id, e)
                client.pullpoint = False
                return await self._subscribe(client, PUSH)
            sub = _Sub(g.address, PULL)
        else:
            # accepted from now on: a camera may post its first Notify (the current state)
            # before its answer to Subscribe arrives
            self._push_token = token = secrets.token_urlsafe(18)
            g = await client.subscribe(f"{self.notify_base}/{self.cfg.id}/{token}", itt)
            sub = _Sub(g.address, PUSH)
        self._sub = sub
        lease = timing.lease_of(
            self._mono(), g.current, g.termination, asked, client.skew, self._wall()
        )
        st = self.status
        st.subscriptions += 1
        st.subscription, st.using = sub.address, "pullpoint" if kind == PULL else "notify"
        self._remember(lease)
        log.info("camera %s: subscribed (%s) at %s for %.0f s", self.cfg.id, st.using,
                 sub.address, lease.granted)  # fmt: skip
        if not self._absolute and timing.relative_is_broken(lease, asked):
            log.warning(
                "camera %s granted %.0f s for %s: it mistreats durations; absolute times from "
                "now on", self.cfg.id, lease.granted, itt,
            )  # fmt: skip
            self._absolute = st.absolute_times = True
            lease = await self._renew(client, lease)
        if lease.granted <= 0:
            raise Refused(f"the camera granted no lifetime ({lease.granted:.0f} s)", None, False)
        return kind, lease

    async def _renew(self, client: CameraClient, lease: timing.Lease) -> timing.Lease:
        assert self._sub is not None
        asked = self.cfg.lifetime
        cam_now = self._camera_now(lease, client) if self._absolute else None
        g = await client.renew(
            self._sub.address, self._sub.kind, timing.request_time(asked, cam_now)
        )
        new = timing.lease_of(
            self._mono(), g.current, g.termination, asked, client.skew, self._wall()
        )
        self.status.renewals += 1
        self._remember(new)
        if not self._absolute and timing.relative_is_broken(new, asked):
            self._absolute = self.status.absolute_times = True
            return await self._renew(client, new)
        return new

    def _camera_now(self, lease: timing.Lease | None, client: CameraClient) -> datetime:
        if lease is not None and (t := lease.camera_time(self._mono())) is not None:
            return t
        return self._wall() + (client.skew or timedelta())

    # ------------------------------------------------------------------ serving
    async def _pull_loop(self, client: CameraClient, lease: timing.Lease) -> None:
        assert self._sub is not None
        while True:
            lease = await self._keep(client, lease)
            wait = min(
                self.cfg.pull_wait, max(0.0, lease.renew_at(self.renew_fraction) - self._mono())
            )
            try:
                pulled = await client.pull(self._sub.address, wait, self.cfg.message_limit)
            except Unreachable as e:
                await self._hiccup(lease, e)
                continue
            self._worked()
            await self._hand(pulled.messages, client.event_service)

    async def _push_loop(self, client: CameraClient, lease: timing.Lease) -> None:
        while True:
            lease = await self._keep(client, lease)
            await asyncio.sleep(max(0.0, lease.renew_at(self.renew_fraction) - self._mono()))

    async def _keep(self, client: CameraClient, lease: timing.Lease) -> timing.Lease:
        """Renew `lease` when due (retrying an unreachable camera until it would expire)."""
        while self._mono() >= lease.renew_at(self.renew_fraction):
            try:
                lease = await self._renew(client, lease)
            except Unreachable as e:
                await self._hiccup(lease, e)
                continue
            self._worked()
        return lease

    async def _hiccup(self, lease: timing.Lease, e: CameraError) -> None:
        """The camera did not answer: keep the subscription while it may live."""
        left = lease.expires - self._mono()
        if left <= 0:
            raise Gone(f"subscription expired while the camera did not answer ({e})", None, True)
        self._error(e)
        self.status.state = UNREACHABLE
        await asyncio.sleep(min(left, max(self.backoff.initial, 1.0)))

    def _worked(self) -> None:
        self.status.state = model.SUBSCRIBED
        if not self._healthy:
            self._healthy = True
            self.backoff.reset()

    async def accept_notify(self, token: str, notify: Element) -> bool:
        """A Notify the camera posted to this source's endpoint (gateway.onvif.webhook).
        False (and nothing handed on) when `token` is not the current subscription's."""
        expected = self._push_token
        if expected is None or not secrets.compare_digest(token, expected):
            return False
        self._worked()
        client = self._client
        await self._hand(
            messages.notification_messages(notify),
            client.event_service if client else self.cfg.address,
        )
        return True

    async def _hand(self, nms: Sequence[Element], producer: str) -> None:
        events: list[model.CameraEvent] = []
        for nm in nms:
            got = messages.read_notification(nm, self.cfg.id, producer)
            if isinstance(got, str):
                if got not in self._skipped_logged and len(self._skipped_logged) < 32:
                    self._skipped_logged.add(got)
                    log.warning("camera %s: a notification skipped: %s", self.cfg.id, got)
                continue
            events.append(got)
        if not events:
            return
        self.status.events += len(events)
        self.status.last_event = self._wall()
        try:
            await self.sink.camera_events(self.cfg.id, events)
        except Exception as e:
            log.exception("camera %s: the sink failed on %d events", self.cfg.id, len(events))
            self._error(e)

    # ------------------------------------------------------------------ releasing
    async def _end_cycle(self, gone: bool) -> None:
        client, self._client = self._client, None
        sub, self._sub = self._sub, None
        self._push_token = None
        if sub is not None:
            if gone:
                self._forget()
            elif client is not None:
                await self._release(client, sub.address, sub.kind)
            self.status.subscription = self.status.expires = None
            self.status.using = None
        if client is not None:
            await client.close()

    async def _release(self, client: CameraClient, address: str, kind: str) -> bool:
        """Unsubscribe; True when the camera holds it no more (also when it never knew it)."""
        try:
            async with asyncio.timeout(self.timeout):  # not wait_for: client.py _call
                await client.unsubscribe(address, kind)
        except Gone:
            pass
        except (CameraError, TimeoutError) as e:
            log.warning("camera %s: could not unsubscribe %s: %s", self.cfg.id, address, e)
            if isinstance(e, Refused):  # it answered and refused: it will expire there
                self._forget()
                return True
            # kept (in the state file too) and released first by the next cycle
            expires = self.status.expires or self._wall() + timedelta(seconds=self.cfg.lifetime)
            self._leftover = (address, kind, expires)
            return False
        self._forget()
        return True

    async def _release_leftover(self, client: CameraClient) -> None:
        left = self._leftover
        if left is None:
            return
        address, kind, expires = left
        if expires <= self._wall():
            self._forget()
            return
        if not await self._release(client, address, kind):
            raise Unreachable(f"the earlier subscription {address} could not be released")

    # ------------------------------------------------------------------ state file
    def _remember(self, lease: timing.Lease) -> None:
        assert self._sub is not None
        expires = self._wall() + timedelta(seconds=lease.expires - self._mono())
        self.status.expires = expires
        self._leftover = None
        if self.state_file is None:
            return
        data = {"subscription": self._sub.address, "kind": self._sub.kind,
                "expires": format_datetime(expires)}  # fmt: skip
        tmp = self.state_file.with_suffix(".tmp")
        try:
            self.state_file.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self.state_file)
        except OSError as e:
            log.warning("camera %s: could not write %s: %s", self.cfg.id, self.state_file, e)

    def _forget(self) -> None:
        self._leftover = None
        if self.state_file is not None:
            with contextlib.suppress(OSError):
                self.state_file.unlink()

    def _read_state(self) -> tuple[str, str, datetime] | None:
        if self.state_file is None:
            return None
        try:
            data = json.loads(self.state_file.read_text())
            kind = data["kind"] if data["kind"] in (PULL, PUSH) else PULL
            return str(data["subscription"]), kind, parse_datetime(str(data["expires"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    # ------------------------------------------------------------------ status
    def _error(self, e: BaseException) -> None:
        st = self.status
        st.errors += 1
        st.last_error = str(e) or type(e).__name__
        st.last_error_at = self._wall()
        log.warning("camera %s: %s", self.cfg.id, st.last_error)


class Cameras:
    """The gateway's camera sources by id: started and stopped together."""

    def __init__(self, sources: Sequence[CameraSource]) -> None:
        self.by_id = {s.cfg.id: s for s in sources}

    def start(self) -> None:
        for s in self.by_id.values():
            s.start()

    async def stop(self) -> None:
        await asyncio.gather(*(s.stop() for s in self.by_id.values()))

    def statuses(self) -> list[model.CameraStatus]:
        return [s.status for s in self.by_id.values()]

    def get(self, camera_id: str) -> CameraSource | None:
        return self.by_id.get(camera_id)
