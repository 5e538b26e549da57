# PullPoints (WS-BaseNotification 1.3 §5): a fixed number of them, each a fixed-size ring that
# drops the oldest message when full and counts the drops.
#
# A ring item is either a string (the content of a wsnt:NotificationMessage received by Notify)
# or a tuple (subscription, topic index, payload, time) delivered in memory by one of the
# device's own subscriptions; the NotificationMessage is rendered only when fetched, to keep
# 32 messages small on a 64 KiB heap.
from wsn.core.ring import Ring
from wsn.core.subscriptions import new_id


class PullPoint:
    def __init__(self, pid, size, now):
        self.id = pid
        self.ring = Ring(size)
        self.touched = now
        self.active = True


class PullPointTable:
    def __init__(self, count, size):
        self.slots = [None] * count
        self.size = size

    def __iter__(self):
        for p in self.slots:
            if p is not None:
                yield p

    def __len__(self):
        return sum(1 for p in self.slots if p is not None)

    def create(self, rand, now, idle_s=None):
        # -> PullPoint, or None when all slots are taken (after reclaiming idle ones)
        if idle_s:
            self.expire_idle(now, idle_s)
        for i in range(len(self.slots)):
            if self.slots[i] is None:
                p = PullPoint(new_id(rand, "p"), self.size, now)
                self.slots[i] = p
                return p
        return None

    def get(self, pid):
        for p in self.slots:
            if p is not None and p.id == pid:
                return p
        return None

    def remove(self, pid):
        for i in range(len(self.slots)):
            p = self.slots[i]
            if p is not None and p.id == pid:
                p.active = False
                self.slots[i] = None
                return p
        return None

    def expire_idle(self, now, idle_s):
        gone = []
        for p in list(self):
            if now - p.touched >= idle_s:
                self.remove(p.id)
                gone.append(p)
        return gone
