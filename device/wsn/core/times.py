# xsd:dateTime and xsd:duration from and to integer seconds.
#
# The core's clock is an int: seconds since 2000-01-01T00:00:00Z (MicroPython's embedded
# epoch). It stays a small int on 32-bit boards (31-bit small ints) until 2034, where Unix
# time (~1.76e9) would not; the I/O layer converts (wsn.device.now). No floats anywhere: boards
# have single precision. Calendar arithmetic is proleptic Gregorian (H. Hinnant's
# days_from_civil), valid for any year the callers meet.
from micropython import const

UNIX_2000 = const(946684800)  # Unix time of 2000-01-01T00:00:00Z
_DAYS_0000_TO_2000 = const(730425)  # days from 0000-03-01 to 2000-01-01


class TimeError(ValueError):
    pass


def days_from_civil(y, m, d):
    if m <= 2:
        y -= 1
    era = y // 400
    yoe = y - era * 400
    mp = m - 3 if m > 2 else m + 9
    doy = (153 * mp + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - _DAYS_0000_TO_2000


def civil_from_days(z):
    z += _DAYS_0000_TO_2000
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    y = yoe + era * 400
    if m <= 2:
        y += 1
    return y, m, d


def format_datetime(t):
    # 2026-11-21T05:00:00Z from integer seconds since 2000
    days = t // 86400
    s = t - days * 86400
    y, m, d = civil_from_days(days)
    return "%04d-%02d-%02dT%02d:%02d:%02dZ" % (y, m, d, s // 3600, (s // 60) % 60, s % 60)


def _int(s, what):
    if not s or not s.isdigit():
        raise TimeError("bad %s '%s'" % (what, s))
    return int(s)


def parse_datetime(s):
    # xsd:dateTime -> int seconds since 2000 (fractions truncated). No zone = UTC
    # (WS-BaseNotification 1.3 §4.2: "MUST be interpreted as universal time").
    s = s.strip()
    if len(s) < 19 or s[4] != "-" or s[7] != "-" or s[10] != "T" or s[13] != ":" or s[16] != ":":
        raise TimeError("not an xsd:dateTime or duration: %s" % s)
    y = _int(s[0:4], "year")
    mo = _int(s[5:7], "month")
    d = _int(s[8:10], "day")
    h = _int(s[11:13], "hour")
    mi = _int(s[14:16], "minute")
    se = _int(s[17:19], "second")
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h <= 24 and mi <= 59 and se <= 60):
        raise TimeError("out of range: %s" % s)
    rest = s[19:]
    if rest[:1] == ".":
        k = 1
        while k < len(rest) and rest[k].isdigit():
            k += 1
        if k == 1:
            raise TimeError("bad fraction: %s" % s)
        rest = rest[k:]
    off = 0
    if rest == "Z" or rest == "":
        pass
    elif len(rest) == 6 and rest[0] in "+-" and rest[3] == ":":
        off = _int(rest[1:3], "zone hour") * 3600 + _int(rest[4:6], "zone minute") * 60
        if rest[0] == "+":
            off = -off
    else:
        raise TimeError("bad zone: %s" % s)
    return days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se + off


def parse_duration(s):
    # xsd:duration -> int seconds (a fraction of a second rounds up, so a short positive
    # duration is never 0). Years count 365 days and months 30: a subscription's lifetime
    # needs no calendar.
    s = s.strip()
    neg = s[:1] == "-"
    if neg:
        s = s[1:]
    if s[:1] != "P" or len(s) < 2 or s[-1] == "T":
        raise TimeError("bad duration: %s" % s)
    total = 0
    num = ""
    in_time = False
    seen = False
    for c in s[1:]:
        if c.isdigit() or c == ".":
            num += c
            continue
        if c == "T":
            if in_time or num:
                raise TimeError("bad duration: %s" % s)
            in_time = True
            continue
        if not num:
            raise TimeError("bad duration: %s" % s)
        if "." in num:
            if c != "S" or not in_time:
                raise TimeError("fraction not in seconds: %s" % s)
            w, _, f = num.partition(".")
            if (not w and not f) or (w and not w.isdigit()) or (f and not f.isdigit()):
                raise TimeError("bad duration: %s" % s)
            v = int(w or "0") + (1 if f.strip("0") else 0)
        else:
            v = int(num)
        if in_time:
            mult = {"H": 3600, "M": 60, "S": 1}.get(c)
        else:
            mult = {"Y": 31536000, "M": 2592000, "W": 604800, "D": 86400}.get(c)
        if mult is None:
            raise TimeError("bad duration: %s" % s)
        total += v * mult
        num = ""
        seen = True
    if num or not seen:
        raise TimeError("bad duration: %s" % s)
    return -total if neg else total


def parse_time(text, now):
    # The [xsd:dateTime | xsd:duration] of InitialTerminationTime / TerminationTime
    # (WS-BaseNotification 1.3 §4.2, §6.1.1) -> absolute int seconds.
    text = text.strip()
    if text[:1] == "P" or text[:2] == "-P":
        return now + parse_duration(text)
    return parse_datetime(text)
