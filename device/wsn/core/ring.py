# A fixed-size FIFO that drops the oldest item when full and counts what it dropped.
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
