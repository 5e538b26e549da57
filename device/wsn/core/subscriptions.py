# Subscriptions (WS-BaseNotification 1.3 §4.2, §6) in a fixed table.
#
# The table has N slots allocated at start; a Subscribe on a full table first reclaims expired
# subscriptions, then fails (SubscribeCreationFailedFault). Ids are random (64 bits from the
# entropy source the I/O layer passes in): the id in the subscription's address is the
# capability to manage it, and no counter exists that could wrap and reuse an id (cf. umqtt's
# 16-bit packet id).
import binascii

from wsn.core.ring import Ring


def new_id(rand, prefix):
    return prefix + str(binascii.hexlify(rand(8)), "ascii")


class Subscription:
    def __init__(self, sid, consumer, refparams, mask, raw, expires, version, created, qlen):
        self.id = sid
        self.consumer = consumer  # ConsumerReference address
        self.refparams = refparams  # its reference parameters, as header XML to echo
        self.mask = mask  # topic bit mask (TopicSet indices); all topics if no filter
        self.raw = raw  # wsnt:UseRaw
        self.expires = expires  # int seconds since 2000, or None (no scheduled termination)
        self.version = version  # SOAP version of the Subscribe: pushes use the same
        self.created = created
        self.paused = False
        self.pullpoint = None  # PullPoint if the consumer is one of ours (in-memory delivery)
        self.queue = Ring(qlen) if qlen else None  # pending pushes: (topic, payload, time)
        self.sending = False  # the I/O layer runs one sender per subscription
        self.active = True
        self.delivered = 0
        self.failed = 0  # pushes given up after the retries


class SubscriptionTable:
    def __init__(self, size):
        self.slots = [None] * size

    def __len__(self):
        return sum(1 for s in self.slots if s is not None)

    def __iter__(self):
        for s in self.slots:
            if s is not None:
                yield s

    def get(self, sid):
        for s in self.slots:
            if s is not None and s.id == sid:
                return s
        return None

    def expire(self, now):
        # destroy every subscription whose termination time has passed -> list of them
        gone = []
        for i in range(len(self.slots)):
            s = self.slots[i]
            if s is not None and s.expires is not None and s.expires <= now:
                s.active = False
                self.slots[i] = None
                gone.append(s)
        return gone

    def add(self, sub, now):
        # -> True if stored; expired subscriptions are reclaimed first
        for _ in range(2):
            for i in range(len(self.slots)):
                if self.slots[i] is None:
                    self.slots[i] = sub
                    return True
            if not self.expire(now):
                break
        return False

    def remove(self, sid):
        for i in range(len(self.slots)):
            s = self.slots[i]
            if s is not None and s.id == sid:
                s.active = False
                self.slots[i] = None
                return s
        return None
