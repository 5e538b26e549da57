# Subscriptions (WS-BaseNotification 1.3 §4.2, §6) in a fixed table.
#
# The table has N slots allocated at start; a Subscribe on a full table first reclaims expired
# subscriptions, then fails (SubscribeCreationFailedFault). Ids are random (64 bits from the
# entropy source the I/O layer passes in): the id in the subscription's address is the
# capability to manage it, and no counter exists that could wrap and reuse an id (cf. umqtt's
# 16-bit packet id).
import binascii

# Ring: a fixed-size FIFO that drops the oldest item when full and counts what it dropped.
# Used for the pull point (WS-BaseNotification 1.3 §5.1.1 lets a full PullPoint "dispose of
# previously accumulated Notification Messages"), the per-subscription push queue and the
# gateway buffer. The slots are allocated once; nothing grows at run time.


class Ring:
    def __init__(self, size):
        if size < 1:
            raise ValueError("ring size must be >= 1")
        self.slots = [None] * size
        self.head = 0  # index of the oldest item
        self.count = 0
        self.dropped = 0  # items pushed out by newer ones since creation
        self.total = 0  # items ever accepted (for status; a Python int never wraps)

    def __len__(self):
        return self.count

    def push(self, item):
        # -> True if an old item had to be dropped to make room
        size = len(self.slots)
        self.total += 1
        if self.count == size:
            self.slots[self.head] = item
            self.head = (self.head + 1) % size
            self.dropped += 1
            return True
        self.slots[(self.head + self.count) % size] = item
        self.count += 1
        return False

    def peek(self):
        return self.slots[self.head] if self.count else None

    def pop(self):
        if not self.count:
            return None
        item = self.slots[self.head]
        self.slots[self.head] = None
        self.head = (self.head + 1) % len(self.slots)
        self.count -= 1
        return item

    def take(self, n):
        # remove and return up to n oldest items (all if n is None), oldest first
        if n is None or n > self.count:
            n = self.count
        out = []
        for _ in range(n):
            out.append(self.pop())
        return out

    def clear(self):
        while self.count:
            self.pop()


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
