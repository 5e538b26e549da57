"""A Notify sent again is published once (docs/gateway.md "Exactly once when an answer is
lost").

A publisher that gets no answer to a Notify cannot know whether the broker accepted it,
and sends it again. WS-Addressing 1.0 Core §3.2 makes a message's [message id]
(wsa:MessageID) an IRI that "uniquely identifies the message" and leaves what a receiver
does with a repeated one unspecified; this broker treats a Notify whose (publisher,
wsa:MessageID) it has already accepted as that message sent again: answered as the first
one was (202, nothing else to say: Notify is one-way, bw-2.wsdl) and not published, landed
or delivered again. A Notify without wsa:MessageID is published every time, as before.

A caller may rely on:

* `Dedupe.key_of` names the publisher by its registration's device id when the Notify was posted
  to a registration (the device id, not the registration id: a device that registers again,
  e.g. after its registration lapsed while it slept, keeps its key); else by the
  ProducerReference address of its first NotificationMessage; else "" (an anonymous
  publisher: the MessageID alone, whose uniqueness is the sender's duty). Two publishers
  known by a registration or a ProducerReference that happen to use the same MessageID
  therefore never suppress each other's messages;
* `Dedupe.pullpoint_key`, for a Notify posted to a pull point's own address (WS-BaseNotification
  1.3 §5.1.1), names the publisher the same way (its ProducerReference, else anonymous)
  within that pull point: its keys never equal `key_of`'s nor another pull point's;
* `Dedupe.accept_once` runs `accept` at most once per key at a time and not at all for a key in
  the seen-set (gateway.storage_seen: durable, bounded, written in the accept's own
  transaction); a concurrent Notify with the same key waits for the first one's accept
  and is then answered as a duplicate (or, if that accept failed, tries itself). With a
  key, `accept` runs as a task of its own that cancelling the caller does not cancel (a
  cancelled handler's Notify is still committed, once, and its copies wait for that
  outcome); without a key it is awaited in the caller's task, as a plain call;
* `Dedupe.settle` returns once no such accept is running (each committed or failed): the
  app's lifecycle calls it before it stops delivery, the landing writers and Storage
  (gateway.app).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from gateway.metrics import Counts
from gateway.publishers import Registration
from gateway.storage import Storage, StorageError
from gateway.storage_seen import SeenKey
from gateway.wire import ns
from gateway.wire.addressing import Epr, parse_epr
from gateway.wire.faults import RECEIVER, WsnFault
from gateway.wire.soap import SoapRequest
from gateway.wire.xmlutil import Element, child

log = logging.getLogger("gateway.dedupe")

_T_PRODUCER = ns.q(ns.WSNT, "ProducerReference")


class Dedupe:
    """The seen-set keys of one broker's Notify and the accepts running now (module
    docstring). `enabled` false (`--notify-dedupe-ids 0`): every key is None."""

    def __init__(self, storage: Storage, counts: Counts, enabled: bool = True) -> None:
        self._storage = storage
        self._counts = counts
        self.enabled = enabled
        #: seen-set key of a Notify being accepted now -> its accept
        self._inflight: dict[SeenKey, asyncio.Task[None]] = {}

    def running(self) -> list[asyncio.Task[None]]:
        """The accepts running now (their own tasks)."""
        return list(self._inflight.values())

    def key_of(
        self, req: SoapRequest, reg: Registration | None, producer: Epr | None
    ) -> SeenKey | None:
        """The seen-set key of a Notify posted to the broker (`reg` None) or to a
        registration, whose first NotificationMessage names `producer` (module docstring);
        None when it carries no wsa:MessageID or the seen-set is off."""
        mid = req.wsa.message_id
        if not mid or not self.enabled:
            return None
        if reg is not None:
            publisher = "device:" + reg.device_id if reg.device_id else "registration:" + reg.id
        else:
            publisher = _producer(producer)
        return _bounded(publisher), _bounded(mid)

    def pullpoint_key(self, req: SoapRequest, pp_id: str, first: Element) -> SeenKey | None:
        """The seen-set key of a Notify posted to pull point `pp_id` whose first
        NotificationMessage is `first` (module docstring), None as for `key_of`. The pull
        point's id leads the publisher part ("pullpoint:<id>", which no key_of publisher
        starts with; ids are hex, so the space after it ends it)."""
        mid = req.wsa.message_id
        if not mid or not self.enabled:
            return None
        producer: Epr | None = None
        pel = child(first, _T_PRODUCER)
        if pel is not None:
            with contextlib.suppress(ValueError):  # as notify.parse_notify reads it
                producer = parse_epr(pel)
        publisher = "pullpoint:" + pp_id
        if producer is not None:
            publisher += " " + _producer(producer)
        return _bounded(publisher), _bounded(mid)

    async def accept_once(
        self, key: SeenKey | None, accept: Callable[[], Coroutine[Any, Any, None]]
    ) -> None:
        """`accept()` unless `key` was accepted before (module docstring); always when `key`
        is None (awaited in the caller's task: no task of its own on that path)."""
        if key is None:
            await accept()
            return
        inflight = self._inflight
        while (first := inflight.get(key)) is not None:
            if not first.done():
                # waits without cancelling it: a copy whose own handler is cancelled leaves
                # the first copy's accept running
                await asyncio.wait((first,))
            if not first.cancelled() and first.exception() is None:
                self._duplicate(key)  # the same Notify, committed while this copy waited
                return
            # it failed: this copy tries itself. Its done callback may not have run yet
            # (it runs soon, and logs the failure once): forget it here, or this loop would
            # find it again without ever yielding
            if inflight.get(key) is first:
                del inflight[key]
        try:
            seen = self._storage.seen(key)
        except StorageError as e:
            raise WsnFault(
                ns.BF, "BaseFault", f"notification not accepted: {e}", RECEIVER
            ) from None
        if seen:
            self._duplicate(key)
            return
        # the accept runs as a task of its own, shielded from the handler: once its rows are
        # queued for the group commit they will be committed whatever happens to the handler
        # (gateway shutdown, aiohttp's handler cancellation), so its outcome, not the
        # handler's, is what a concurrent copy must wait for; and the in-memory state
        # (queues, pull points, current messages) follows the commit it belongs to
        task = asyncio.get_running_loop().create_task(accept(), name="notify-accept")
        inflight[key] = task
        # registered before any copy can wait on it: runs before the copies wake
        task.add_done_callback(lambda t: self._settled(key, t))
        await asyncio.shield(task)

    def _settled(self, key: SeenKey, task: asyncio.Task[None]) -> None:
        """Forget a finished accept. Its failure is its handler's to answer (a fault); when
        the handler was cancelled nobody answers, its publisher got no answer and sends it
        again, so the failure is only logged, not left to asyncio's "exception was never
        retrieved"."""
        if self._inflight.get(key) is task:
            del self._inflight[key]
        if not task.cancelled() and (e := task.exception()) is not None:
            log.debug("Notify %s of %r not accepted: %s", key[1], key[0], e)

    async def settle(self) -> None:
        """Wait until no accept started by `accept_once` is running (each commits or
        fails), so that the parts they write to may stop (gateway.app)."""
        while self._inflight:
            await asyncio.wait(list(self._inflight.values()))

    def _duplicate(self, key: SeenKey) -> None:
        self._counts.duplicates += 1
        log.debug("Notify %s of %r accepted before: answered, not published again", key[1], key[0])


def _producer(producer: Epr | None) -> str:
    return "producer:" + producer.address if producer is not None else ""


#: longest key part stored as sent; a longer one is stored as its digest, so a row of the
#: seen-set stays small whatever a sender puts in its MessageID or ProducerReference
_KEY_PART_MAX = 256


def _bounded(part: str) -> str:
    if len(part) <= _KEY_PART_MAX:
        return part
    return "sha256:" + hashlib.sha256(part.encode("utf-8", "surrogatepass")).hexdigest()
