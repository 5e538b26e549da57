from wsn.core import xml as X
from wsn.core.soap import reading
from wsn.core.xml import parse_datetime


def _value(v, decimals=2):
    x = reading("d", v, "u", 0, decimals)
    return X.parse(x.encode()).children[0].value()


def test_values_with_fixed_decimals():
    # boards have single-precision floats: never print repr(), always fixed decimals
    assert _value(21.5) == "21.5"
    assert _value(21.456) == "21.46"
    assert _value(-0.001) == "0"
    assert _value(3) == "3"
    assert _value(100.0) == "100"
    assert _value(0.1 + 0.2) == "0.3"
    assert _value(1234.5678, 1) == "1234.6"


def test_reading_payload_matches_the_contract():
    t = parse_datetime("2026-11-21T05:00:00Z")
    x = reading('dev"<1>', 21.5, "Cel", t, 2)
    r = X.parse(x.encode())
    assert r.ns == "urn:wsn-edge:reading" and r.name == "Reading"
    assert r.get("device") == 'dev"<1>'
    assert r.find(r.ns, "value").value() == "21.5"
    assert r.find(r.ns, "unit").value() == "Cel"
    assert r.find(r.ns, "time").value() == "2026-11-21T05:00:00Z"
