# The device's clock: integer seconds since 2000-01-01T00:00:00Z for the core (wsn.core.times),
# ticks for intervals. MicroPython ports differ in their epoch (unix: 1970, most boards: 2000;
# time.gmtime(0) tells) and in time.time()'s type (float on the 64-bit unix port, int on
# boards); both are normalised here. Unix time (~1.76e9) is not a small int on 32-bit ports,
# seconds since 2000 (~8.5e8) are.
import time

_OFFSET = 946684800 if time.gmtime(0)[0] == 1970 else 0


def now():
    return int(time.time()) - _OFFSET


def ticks_ms():
    return time.ticks_ms()


def elapsed_ms(since):
    return time.ticks_diff(time.ticks_ms(), since)
