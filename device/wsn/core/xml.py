# A small, bounded, namespace-aware XML reader, and xsd:dateTime / xsd:duration from text.
# Loaded for a request (or the registration) and dropped when the device is idle again
# (wsn.device); writing XML is wsn.core.soap.
#
# parse() builds a small tree of Element in one pass over a bytes buffer, resolving
# namespaces. What a caller may rely on:
# - UTF-8 input; a BOM and the XML declaration are skipped; comments and processing
#   instructions are ignored; CDATA is text.
# - No DTD: a DOCTYPE is rejected, so no entity can be declared or expanded and nothing is
#   ever fetched (the "billion laughs" and external entity tricks cannot start). Only the five
#   predefined entities and character references are decoded.
# - Bounded: depth, element count and attributes per element are limited (XMLError past
#   them); the buffer size is the HTTP layer's limit.
# - Every element remembers its byte span in the buffer, so a subtree can be copied out
#   verbatim (outer_xml) with the namespace declarations it inherits.
from micropython import const

from wsn.core.soap import DECLS, escape

_WS = const(" \t\r\n")
# the predefined entities (XML 1.0 §4.6), name then value: a constant, no dict on the heap
_ENT = const(("lt", "<", "gt", ">", "amp", "&", "quot", '"', "apos", "'"))


class XMLError(ValueError):
    pass


# MicroPython interns every one-character str that indexing or iterating a str makes, and
# every chr(), and never frees a name: walking a request's names character by character would
# keep each distinct character an attacker sends (tests/device/test_small_heap.py). What comes
# from the network is read by slices, str methods or its UTF-8 bytes (ints), never by index.
_NOT_NAME = const(b" \t\r\n<>&\"'=/;!?()[]{}*|,+@$%^`~\\")


def is_name(s):
    # XML 1.0 NameChar, restricted to what matters here: no markup, quotes or spaces.
    b = s.encode()
    if not b or b[0] in b"-.0123456789":
        return False
    for c in b:
        if c in _NOT_NAME:
            return False
    return True


def _char(n):
    # the character of a character reference (chr() would intern it): its UTF-8 bytes decoded.
    # ValueError unless it is a Char (XML 1.0 §2.2, §4.1 "Legal Character").
    if not (n in (9, 10, 13) or 32 <= n < 0xD800 or 0xE000 <= n < 0xFFFE or 0xFFFF < n < 0x110000):
        raise ValueError
    k = (n > 127) + (n > 0x7FF) + (n > 0xFFFF)  # continuation bytes
    b = bytearray(k + 1)
    for i in range(k, 0, -1):
        b[i] = 0x80 | n & 63
        n >>= 6
    b[0] = n | (0, 0xC0, 0xE0, 0xF0)[k]
    return _dec(b)


def unescape(s):
    # Predefined entities and character references only (XML 1.0 §4.6); anything else is an
    # undeclared entity: we have no DTD, so it is an error, never an expansion.
    if "&" not in s:
        return s
    parts = s.split("&")
    out = [parts[0]]
    for p in parts[1:]:
        k = p.find(";")
        if k < 0 or k > 11:
            raise XMLError("unterminated entity")
        n = p[:k]
        if n[:1] == "#":
            try:
                out.append(_char(int(n[2:], 16) if n[1:2] == "x" else int(n[1:])))
            except (ValueError, OverflowError):
                raise XMLError("bad character reference %s" % n)
        elif n in _ENT and not _ENT.index(n) & 1:
            out.append(_ENT[_ENT.index(n) + 1])
        else:
            raise XMLError("undeclared entity &%s;" % n)
        out.append(p[k + 1:])
    return "".join(out)


def _dec(s):
    try:
        return str(s, "utf-8")
    except UnicodeError:
        raise XMLError("text not in UTF-8")


class Element:
    # ns: namespace URI ('' for none); name: local name; attrs: dict of '{ns}local' or 'local'
    # -> value, or None; children: list of Element; text: the direct character data (all
    # pieces joined); scope: dict prefix -> URI in scope here ('' = default namespace);
    # decl: prefixes declared on this element itself; start/end: byte span in the buffer.
    def __init__(self, ns, name, prefix, attrs, scope, decl, start):
        self.ns = ns
        self.name = name
        self.prefix = prefix
        self.attrs = attrs
        self.scope = scope
        self.decl = decl
        self.children = []
        self.text = ""
        self.start = self.end = start

    def get(self, key):
        # the attribute's value ('{ns}local' or 'local'), or None
        return self.attrs.get(key) if self.attrs else None

    def find(self, ns, name):
        for c in self.children:
            if c.name == name and c.ns == ns:
                return c

    def findall(self, ns, name):
        return [c for c in self.children if c.name == name and c.ns == ns]

    def value(self):
        return self.text.strip()

    def resolve(self, name):
        # A QName in content (e.g. a TopicExpression): (namespace, local); the prefix must be
        # in scope here. An unprefixed name takes the default namespace, or '' if none.
        return _split(name, self.scope, False)[:2]


def _split(name, scope, attr):
    # -> (namespace, local, prefix) of the QName name in scope; unprefixed attributes are in no
    # namespace, unprefixed elements in the default one
    p, _, local = name.rpartition(":")
    if not is_name(local) or (p and not is_name(p)):
        raise XMLError("bad name %s" % name)
    if not p:
        return ("" if attr else scope.get("", "")), local, ""
    uri = scope.get(p)
    if uri is None:
        raise XMLError("undeclared prefix %s" % p)
    return uri, local, p


def parse(buf, depth=16, count=256, attrs=16):
    # Parse a whole document (bytes) into its root Element, in one pass over the buffer (one
    # piece of markup at a time, no lookahead beyond it), at most depth deep, count elements
    # and attrs attributes per element. Raises XMLError with a reason a human can act on for
    # anything malformed, truncated or over the limits.
    if not isinstance(buf, (bytes, bytearray)):
        buf = bytes(buf)
    n = len(buf)
    i = 3 if buf[:3] == b"\xef\xbb\xbf" else 0
    stack = []
    root = None
    n_el = 0
    while i < n:
        top = stack[-1] if stack else None
        if buf[i] != 60:  # text up to the next '<'
            j = buf.find(b"<", i)
            if j < 0:
                j = n
            t = _dec(buf[i:j])
            if "]]>" in t:
                raise XMLError("']]>' in text")
            if top:
                top.text += unescape(t)
            elif t.strip():
                raise XMLError("text outside the root")
            i = j
            continue
        c = buf[i + 1:i + 2]
        if c == b"?" or buf[i:i + 4] == b"<!--":  # a PI / the XML declaration, a comment
            e = b"?>" if c == b"?" else b"-->"
            j = buf.find(e, i + 2)
            if j < 0:
                raise XMLError("truncated at byte %d" % i)
            i = j + len(e)
            continue
        if buf[i:i + 9] == b"<![CDATA[":  # text, verbatim
            j = buf.find(b"]]>", i)
            if j < 0:
                raise XMLError("truncated at byte %d" % i)
            if top:
                top.text += _dec(buf[i + 9:j])
            i = j + 3
            continue
        if c == b"!":
            raise XMLError("DOCTYPE not allowed" if buf[i + 2:i + 9] in (b"DOCTYPE", b"doctype")
                           else "bad '<!' at byte %d" % i)
        # the tag ends at the first '>' outside quotes
        j = i + 1
        q = 0
        while True:
            if j >= n:
                raise XMLError("truncated at byte %d" % i)
            c = buf[j]
            if q:
                if c == q:
                    q = 0
            elif c == 34 or c == 39:
                q = c
            elif c == 62:
                break
            j += 1
        s = _dec(buf[i + 1:j])
        j += 1
        if s[:1] == "/":
            name = s[1:].strip()
            if not top:
                raise XMLError("unexpected end tag </%s>" % name)
            want = (top.prefix + ":" + top.name) if top.prefix else top.name
            if name != want:
                raise XMLError("end tag </%s> does not match <%s>" % (name, want))
            stack.pop().end = j
            i = j
            continue
        if root is not None and not stack:
            raise XMLError("content after the root")
        n_el += 1
        if n_el > count:
            raise XMLError("more than %d elements" % count)
        if len(stack) >= depth:
            raise XMLError("nesting deeper than %d" % depth)
        empty = s[-1:] == "/"
        if empty:
            s = s[:-1]
        # the name ends at the first white space (split(): no character of _WS made one by one)
        name = s.split(None, 1)[0] if s and s[:1] not in _WS else ""
        s = s[len(name):]
        scope = top.scope if top else {"xml": "http://www.w3.org/XML/1998/namespace"}
        decl = None
        pairs = []
        while True:
            # ws attr ws? = ws? "value"
            s = s.lstrip(_WS)
            if not s:
                break
            e = s.find("=")
            an = s[:e].rstrip(_WS) if e >= 0 else s
            if e < 0 or not is_name(an):
                raise XMLError("bad attribute %s in <%s" % (an, name))
            s = s[e + 1:].lstrip(_WS)
            q = s[:1]
            if not q or q not in "\"'":
                raise XMLError("unquoted attribute %s in <%s" % (an, name))
            e = s.find(q, 1)
            v = s[1:e]
            s = s[e + 1:]
            if "<" in v or s[:1] not in _WS:
                raise XMLError("bad attribute %s in <%s" % (an, name))
            if len(pairs) + len(decl or ()) >= attrs:
                raise XMLError("more than %d attributes in <%s" % (attrs, name))
            # attribute-value normalisation (XML 1.0 §3.3.3) for literal whitespace
            v = unescape(v.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")
                         .replace("\t", " "))
            if an == "xmlns" or an[:6] == "xmlns:":
                if decl is None:
                    decl = []
                    scope = dict(scope)
                if an[6:] and not v:
                    raise XMLError("empty namespace for prefix %s" % an[6:])
                scope[an[6:]] = v
                decl.append(an[6:])
            else:
                pairs.append((an, v))
        a = None
        for an, v in pairs:
            uri, local, _ = _split(an, scope, True)
            key = "{%s}%s" % (uri, local) if uri else local
            if a is None:
                a = {}
            elif key in a:
                raise XMLError("duplicate attribute %s" % an)
            a[key] = v
        uri, local, p = _split(name, scope, False)
        el = Element(uri, local, p, a, scope, decl, i)
        if top:
            top.children.append(el)
        else:
            root = el
        if empty:
            el.end = j
        else:
            stack.append(el)
        i = j
    if stack:
        raise XMLError("truncated: <%s> not closed" % stack[-1].name)
    if root is None:
        raise XMLError("no root element")
    return root


def outer_xml(el, buf):
    # The element's markup copied from buf, with declarations added for the namespace
    # bindings it inherits (so QNames in its content still resolve when it is moved), except
    # those every envelope of the device declares alike (soap.DECLS): it is copied into one.
    src = _dec(buf[el.start:el.end])
    extra = ""
    own = el.decl or ()
    for p in el.scope:
        if p != "xml" and p not in own:
            d = ' xmlns%s%s="%s"' % (":" if p else "", p, escape(el.scope[p]))
            if d not in DECLS:
                extra += d
    k = 1 + len(el.prefix) + (1 if el.prefix else 0) + len(el.name)
    return src[:k] + extra + src[k:]


# ---------------------------------------------------------------- XML Schema datatypes
# xsd:dateTime and xsd:duration to integer seconds (wsn.core.soap writes xsd:dateTime).
#
# The core's clock is an int: seconds since 2000-01-01T00:00:00Z (MicroPython's embedded
# epoch). It stays a small int on 32-bit boards (31-bit small ints) until 2034, where Unix
# time (~1.76e9) would not; the I/O layer converts (wsn.device.now). No floats anywhere: boards
# have single precision. Calendar arithmetic is proleptic Gregorian (H. Hinnant's
# days_from_civil / civil_from_days), valid for any year the callers meet.
_DAYS = const(730425)  # days from 0000-03-01 to 2000-01-01


# a value that is no xsd:dateTime or xsd:duration
TimeError = XMLError


def _int(s):
    if not s or not s.isdigit():
        raise TimeError("bad number %s" % s)
    return int(s)


def parse_datetime(s):
    # xsd:dateTime -> int seconds since 2000 (fractions truncated). No zone = UTC
    # (WS-BaseNotification 1.3 §4.2: "MUST be interpreted as universal time").
    s = s.strip()
    if len(s) < 19 or s[4:5] + s[7:8] + s[10:11] + s[13:14] + s[16:17] != "--T::":
        raise TimeError("bad xsd:dateTime %s" % s)
    y = _int(s[:4])
    v = []
    for k in (5, 8, 11, 14, 17):
        v.append(_int(s[k:k + 2]))
    m, d, h, mi, se = v
    if not (1 <= m <= 12 and 1 <= d <= 31 and h <= 24 and mi <= 59 and se <= 60):
        raise TimeError("bad xsd:dateTime %s" % s)
    rest = s[19:]
    if rest[:1] == ".":
        k = rest[1:].lstrip("0123456789")
        if len(k) == len(rest) - 1:
            raise TimeError("bad xsd:dateTime %s" % s)
        rest = k
    off = 0
    if rest not in ("Z", ""):
        if len(rest) != 6 or rest[:1] not in ("+", "-") or rest[3:4] != ":":
            raise TimeError("bad xsd:dateTime %s" % s)
        off = _int(rest[1:3]) * 3600 + _int(rest[4:6]) * 60
        if rest[:1] != "-":
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
    # needs no calendar. Read on its UTF-8 bytes (is_name says why).
    s = s.strip()
    neg = s[:1] == "-"
    if neg:
        s = s[1:]
    bad = TimeError("bad xsd:duration %s" % s)
    b = s.encode()
    if b[:1] != b"P" or len(b) < 2 or b[-1:] == b"T":
        raise bad
    total = 0
    t = 0  # 4 once in the time part: the index of its units below
    j = 1  # where the number being read starts
    for i in range(1, len(b)):
        c = b[i:i + 1]
        if c in b"0123456789.":
            continue
        num = b[j:i]
        j = i + 1
        if c == b"T":
            if t or num:
                raise bad
            t = 4
            continue
        k = (b"HMS" if t else b"YMWD").find(c)
        if not num or k < 0:
            raise bad
        w, dot, f = num.partition(b".")
        if dot and (c != b"S" or not (w + f).isdigit() or b"." in f):
            raise bad
        total += (int(w or b"0") + (1 if f.strip(b"0") else 0)) * \
            (31536000, 2592000, 604800, 86400, 3600, 60, 1)[k + t]
    if j < len(b):
        raise bad
    return -total if neg else total


def parse_time(text, now):
    # The [xsd:dateTime | xsd:duration] of InitialTerminationTime / TerminationTime
    # (WS-BaseNotification 1.3 §4.2, §6.1.1) -> absolute int seconds.
    text = text.strip()
    if text.lstrip("-")[:1] == "P":
        return now + parse_duration(text)
    return parse_datetime(text)
