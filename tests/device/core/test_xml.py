# ruff: noqa: UP031, E501 - MicroPython-compatible test code (%-formatting runs on every port)
from wsn.core import xml as X
from wsn.core.soap import escape


def _err(buf, word):
    try:
        X.parse(buf)
    except X.XMLError as e:
        assert word in str(e), (word, str(e))
        return
    raise AssertionError("no XMLError for %r" % buf)


def test_parse_namespaces_prefixes_and_default():
    r = X.parse(b'<a:root xmlns:a="urn:a" xmlns="urn:d"><child x="1" a:y="2">t</child></a:root>')
    assert r.ns == "urn:a" and r.name == "root"
    c = r.children[0]
    assert c.ns == "urn:d" and c.name == "child"
    assert c.get("x") == "1" and c.get("{urn:a}y") == "2"
    assert c.value() == "t"
    assert r.find("urn:d", "child") is c
    assert r.findall("urn:d", "child") == [c]


def test_whitespace_comments_pi_cdata_bom():
    buf = b'\xef\xbb\xbf<?xml version="1.0"?>\n<!-- hi -->\n<r>\n <!-- c --> <x/> <![CDATA[<raw>&]]></r>\n'
    r = X.parse(buf)
    assert r.name == "r" and len(r.children) == 1
    assert "<raw>&" in r.text


def test_entities_and_char_refs():
    r = X.parse(b'<r a="&lt;&quot;&#65;">&amp;&gt;&#x42;&apos;</r>')
    assert r.get("a") == '<"A'
    assert r.text == "&>B'"
    # every UTF-8 length (the characters are made from their UTF-8 bytes, not by chr())
    r = X.parse(b"<r>&#xe9;&#x4E00;&#x1F600;&#127;</r>")
    assert r.text == "\u00e9\u4e00\U0001f600\x7f", r.text
    for ref in (b"&#x110000;", b"&#-1;", b"&#xD800;", b"&#x;", b"&#0;", b"&#xFFFE;"):
        _err(b"<r>" + ref + b"</r>", "bad character reference")


def test_names_of_any_script():
    # names are checked on their UTF-8 bytes: any character but the excluded ASCII ones
    r = X.parse("<\u540d\u524d a\u00e9='1'><b\u00e9/></\u540d\u524d>".encode())
    assert r.name == "\u540d\u524d" and r.get("a\u00e9") == "1"
    assert r.children[0].name == "b\u00e9"
    assert X.is_name("x") and X.is_name("\u00e9") and not X.is_name("") and not X.is_name("1a")
    assert not X.is_name("a b") and not X.is_name("a<") and not X.is_name("-a")


def test_doctype_rejected_no_entity_expansion():
    _err(b'<!DOCTYPE r [<!ENTITY e "x">]><r>&e;</r>', "DOCTYPE")
    _err(b"<r>&e;</r>", "undeclared entity")


def test_malformed_inputs():
    _err(b"<r><a></r>", "does not match")
    _err(b"<r>", "truncated")
    _err(b"<r", "truncated")
    _err(b"<r a=1/>", "unquoted")
    _err(b'<r a="1" a="2"/>', "duplicate")
    _err(b"<p:r/>", "undeclared")
    _err(b"<r/><r/>", "after the root")
    _err(b"text", "outside")
    _err(b"", "no root")
    _err(b"<r>\xff\xfe</r>", "UTF-8")
    _err(b"</r>", "unexpected end")


def test_limits_depth_elements_attributes():
    deep = b"<a>" * 20 + b"</a>" * 20
    try:
        X.parse(deep, depth=16)
        raise AssertionError("depth")
    except X.XMLError as e:
        assert "deeper" in str(e)
    many = b"<r>" + b"<e/>" * 100 + b"</r>"
    try:
        X.parse(many, count=64)
        raise AssertionError("count")
    except X.XMLError as e:
        assert "elements" in str(e)
    attrs = ("<r " + " ".join(['a%d="1"' % i for i in range(20)]) + "/>").encode()
    try:
        X.parse(attrs, attrs=16)
        raise AssertionError("attrs")
    except X.XMLError as e:
        assert "attributes" in str(e)


def test_outer_xml_carries_inherited_namespaces():
    buf = b'<r xmlns:p="urn:p" xmlns="urn:d"><p:x a="1">p:v</p:x></r>'
    r = X.parse(buf)
    s = X.outer_xml(r.children[0], buf)
    again = X.parse(s.encode())
    assert again.ns == "urn:p" and again.get("a") == "1"
    assert again.scope["p"] == "urn:p" and again.scope[""] == "urn:d"
    assert again.resolve(again.value()) == ("urn:p", "v")


def test_escape():
    assert escape("a<b&c>") == "a&lt;b&amp;c&gt;"
    assert escape('"x"') == "&quot;x&quot;"
    r = X.parse(('<r a="%s">%s</r>' % (escape('<&">'), escape("<&>"))).encode())
    assert r.get("a") == '<&">' and r.text == "<&>"
