# The link to the gateway (design.md "Device <-> gateway"), imported only when one is configured:
# the part that stays loaded, the loop that sends the readings. Registration and renewal are
# wsn.publisher (loaded while they run); sleepy mode is the package wsn.sleepy. The readings for
# the gateway wait in the producer's outbox (bounded, oldest dropped and counted) until it
# answers 2xx.
#
# Awake (run, one task): demand-based publishing.
# - register: br:RegisterPublisher (Demand=true) until it succeeds, and renew:
#   wsrf-rl:SetTerminationTime on the registration address every renew_period_s (both
#   wsn.publisher.keep); a ResourceUnknownFault or 404 (registration forgotten, e.g. a gateway
#   restart without state) means register again; so does a push answered that way;
# - send: the outbox in order, up to batch_max readings per Notify (one NotificationMessage
#   each), with a wsa:MessageID that a resend of the same readings repeats (_batch);
# - while the gateway is unreachable, retry every gateway_retry_s (doubling up to
#   gateway_retry_max_s) with a renewal first: the first success after an outage is a renewal,
#   which detects a restarted gateway.
import asyncio
import binascii
import os
import time

from wsn.core import soap as S
from wsn.device import ms_since, post


class Link:
    # the settings and counters are set by wsn.publisher.setup
    reg = mid = waiting = None  # registration address (None: register first)
    state = "unregistered"  # unregistered | registered | down
    last_error = ""

    def wake(self):
        # something to send: end the loop's wait (an asyncio.Event would cost 0.7 KB of heap)
        if self.waiting:
            self.waiting.cancel()

    def set_state(self, state):
        if state != self.state:
            self.state = state
            self.dev.status_line("gateway " + state)

    async def post(self, url, body, ctype):
        self.requests += 1
        return await post(url, body, ctype or S.content_type(self.version),
                          float(self.dev.conf.get("gateway_timeout_s", 5)), self.auth)

    def _batch(self):
        # The batch not answered yet: [wsa:MessageID, its readings, the buffer's drops then],
        # made when there is none. Until the gateway answers, a resend is the same readings with
        # the same MessageID (WS-Addressing 1.0 Core §3.2), so a Notify whose answer was lost
        # is published once (docs/device.md); in sleepy mode the state file keeps it before it
        # is sent. The full buffer drops its oldest readings: those of this batch, first.
        ob = self.p.outbox
        m = self.mid
        if len(ob) and not (m and m[1] + m[2] > ob.dropped):
            m = self.mid = ["urn:wsn-edge:" + binascii.hexlify(os.urandom(8)).decode(),
                            min(len(ob), self.batch_max), ob.dropped]
        return m

    async def send(self):
        # One batched Notify: the readings of _batch, oldest first -> readings the gateway
        # accepted, -1 if it forgot the registration. A refusal for what the messages are would
        # be answered forever: they are dropped (counted). Raises when the gateway is unreachable
        # (they stay, and so does the batch).
        ob = self.p.outbox
        m = self._batch()
        items, url, body, ctype = self.p.gateway_batch(m[1] + m[2] - ob.dropped, self.version, m[0])
        self.mid = [m[0], len(items), ob.dropped]
        st, resp = await self.post(url, body, ctype)
        body = None
        n = len(items)
        if 200 <= st < 300:
            self.delivered += n
            self.batches += 1
        else:
            from wsn.publisher import forgotten

            if forgotten(self, "push", st, resp):
                return -1
            self.rejected += n
            self.p.push_failed += n
            n = 0
        for it in items:  # the full buffer may have dropped some meanwhile: those are gone
            if ob.peek() is it:
                ob.pop()
        self.mid = None
        return n

    async def run(self):
        c = self.dev.conf.get
        retry = delay = float(c("gateway_retry_s", 2))
        retry_max = max(retry, float(c("gateway_retry_max_s", 30)))
        # batch_wait_s > 0 buffers by choice: that long after a reading, more join its Notify
        wait = int(float(c("batch_wait_s", 0)) * 1000)
        ob = self.p.outbox
        self.due = time.ticks_ms()  # of the next renewal (wsn.publisher.keep)
        while True:
            pause = back = 0
            try:
                if self.reg is None or ms_since(self.due) >= 0:
                    from wsn import publisher

                    back = await publisher.keep(self)  # register, or renew
                    publisher = None
                elif len(ob):
                    if wait and len(ob) < self.batch_max:
                        await asyncio.sleep_ms(wait)
                    if await self.send() < 0:
                        self.set_state("unregistered")
                else:
                    pause = min(1, -ms_since(self.due) / 1000)
            except Exception as e:  # noqa: BLE001 - unreachable: retry, renewing first
                self.last_error = repr(e)
                self.set_state("down")
                self.due = time.ticks_ms()
                back = 1
            self.dev.idle()
            if back:  # refused or unreachable: again, less and less often
                pause = delay
                delay = min(delay * 2, retry_max)
            elif not pause:
                delay = retry
            if pause:
                self.waiting = asyncio.current_task()
                try:
                    await asyncio.sleep_ms(int(pause * 1000))
                except asyncio.CancelledError:  # wake()
                    pass
                self.waiting = None
