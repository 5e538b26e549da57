# The reading payload (design.md):
# <rd:Reading xmlns:rd="urn:wsn-edge:reading" device="ID"><rd:value>21.5</rd:value>
#   <rd:unit>Cel</rd:unit><rd:time>2026-11-21T05:00:00Z</rd:time></rd:Reading>
from wsn.core import xml as X


def format_value(v, decimals=2):
    # Boards have single-precision floats: print a fixed number of decimals, never repr().
    if isinstance(v, int):
        return str(v)
    s = "%.*f" % (decimals, v) if decimals >= 0 else str(v)
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s if s not in ("-0", "") else "0"


def reading(device_id, value, unit, t, decimals=2):
    return '<rd:Reading xmlns:rd="urn:wsn-edge:reading" device="%s"><rd:value>%s</rd:value>' \
           '<rd:unit>%s</rd:unit><rd:time>%s</rd:time></rd:Reading>' % (
               X.escape(device_id), format_value(value, decimals), X.escape(unit),
               X.format_datetime(t))
