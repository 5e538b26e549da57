# xsd:dateTime and xsd:duration from and to integer seconds.
#
# The core's clock is an int: seconds since 2000-01-01T00:00:00Z (MicroPython's embedded
# epoch). It stays a small int on 32-bit boards (31-bit small ints) until 2034, where Unix
# time (~1.76e9) would not; the I/O layer converts (wsn.device.now). No floats anywhere: boards
# have single precision. Calendar arithmetic is proleptic Gregorian (H. Hinnant's
# days_from_civil / civil_from_days), valid for any year the callers meet.
from micropython import const

UNIX_2000 = const(946684800)  # Unix time of 2000-01-01T00:00:00Z
_DAYS = const(730425)  # days from 0000-03-01 to 2000-01-01


class TimeError(ValueError):
    pass


def format_datetime(t):
    # 2026-11-21T05:00:00Z from integer seconds since 2000
    z = t // 86400 + _DAYS
    s = t % 86400
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    m = mp + 3 if mp < 10 else mp - 9
    return "%04d-%02d-%02dT%02d:%02d:%02dZ" % (
        yoe + era * 400 + (m <= 2), m, doy - (153 * mp + 2) // 5 + 1, s // 3600, s // 60 % 60,
        s % 60)


def _int(s):
    if not s or not s.isdigit():
        raise TimeError("bad number '%s'" % s)
    return int(s)


def parse_datetime(s):
    # xsd:dateTime -> int seconds since 2000 (fractions truncated). No zone = UTC
    # (WS-BaseNotification 1.3 §4.2: "MUST be interpreted as universal time").
    s = s.strip()
    if len(s) < 19 or s[4] + s[7] + s[10] + s[13] + s[16] != "--T::":
        raise TimeError("not an xsd:dateTime or duration: %s" % s)
    y = _int(s[:4])
    v = []
    for k in (5, 8, 11, 14, 17):
        v.append(_int(s[k:k + 2]))
    m, d, h, mi, se = v
    if not (1 <= m <= 12 and 1 <= d <= 31 and h <= 24 and mi <= 59 and se <= 60):
        raise TimeError("out of range: %s" % s)
    rest = s[19:]
    if rest[:1] == ".":
        k = 1
        while rest[k:k + 1].isdigit():
            k += 1
        if k == 1:
            raise TimeError("bad fraction: %s" % s)
        rest = rest[k:]
    off = 0
    if rest not in ("Z", ""):
        if len(rest) != 6 or rest[0] not in "+-" or rest[3] != ":":
            raise TimeError("bad zone: %s" % s)
        off = _int(rest[1:3]) * 3600 + _int(rest[4:6]) * 60
        if rest[0] == "+":
            off = -off
    # days from civil (Hinnant), March-based years
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m - 3 if m > 2 else m + 9) + 2) // 5 + d - 1
    return (era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - _DAYS) * 86400 + \
        h * 3600 + mi * 60 + se + off


def parse_duration(s):
    # xsd:duration -> int seconds (a fraction of a second rounds up, so a short positive
    # duration is never 0). Years count 365 days and months 30: a subscription's lifetime
    # needs no calendar.
    s = s.strip()
    neg = s[:1] == "-"
    if neg:
        s = s[1:]
    bad = TimeError("bad duration: %s" % s)
    if s[:1] != "P" or len(s) < 2 or s[-1] == "T":
        raise bad
    total = 0
    num = ""
    t = 0  # 4 once in the time part: the index of its units below
    for c in s[1:]:
        if c.isdigit() or c == ".":
            num += c
            continue
        if c == "T":
            if t or num:
                raise bad
            t = 4
            continue
        k = ("HMS" if t else "YMWD").find(c)
        if not num or k < 0:
            raise bad
        w, dot, f = num.partition(".")
        if dot and (c != "S" or not (w + f).isdigit() or "." in f):
            raise bad
        total += (int(w or "0") + (1 if f.strip("0") else 0)) * \
            (31536000, 2592000, 604800, 86400, 3600, 60, 1)[k + t]
        num = ""
    if num:
        raise bad
    return -total if neg else total


def parse_time(text, now):
    # The [xsd:dateTime | xsd:duration] of InitialTerminationTime / TerminationTime
    # (WS-BaseNotification 1.3 §4.2, §6.1.1) -> absolute int seconds.
    text = text.strip()
    if text[:1] == "P" or text[:2] == "-P":
        return now + parse_duration(text)
    return parse_datetime(text)
