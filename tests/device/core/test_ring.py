from wsn.core.producer import Ring


def _take(r, n):
    out = []
    while len(r) and len(out) < n:
        out.append(r.pop())
    return out


def test_fifo_and_drop_oldest():
    r = Ring(3)
    for i in range(5):
        r.push(i)
    assert len(r) == 3 and r.dropped == 2
    assert _take(r, 99) == [2, 3, 4]
    assert len(r) == 0 and r.pop() is None and r.peek() is None


def test_take_partial_and_wraparound():
    r = Ring(4)
    for i in range(3):
        r.push(i)
    assert _take(r, 2) == [0, 1]
    for i in range(3, 7):
        r.push(i)
    assert r.dropped == 1
    assert _take(r, 10) == [3, 4, 5, 6]


def test_size_must_be_positive():
    try:
        Ring(0)
    except ValueError:
        return
    raise AssertionError("Ring(0) accepted")
