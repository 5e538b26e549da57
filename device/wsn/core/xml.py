# A small, bounded, namespace-aware XML reader and the escaping helpers of the writer.
#
# Reading is two layers: Tokenizer (a streaming tokenizer over a bytes buffer: one event at a
# time, no lookahead beyond the current markup) and parse() (builds a small tree of Element
# from the events, resolving namespaces). What a caller may rely on:
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

_LT = const(60)  # <
_GT = const(62)  # >
_SL = const(47)  # /
_EQ = const(61)  # =
_QM = const(63)  # ?
_EX = const(33)  # !

XML_NS = "http://www.w3.org/XML/1998/namespace"

START = const(1)
END = const(2)
TEXT = const(3)
EOF = const(0)


class XMLError(ValueError):
    pass


def _ws(c):
    return c == 32 or c == 10 or c == 13 or c == 9


def is_name(s):
    # XML 1.0 NameChar, restricted to what matters here: no markup, quotes or spaces.
    if not s:
        return False
    c = s[0]
    if c in "-.0123456789":
        return False
    for c in s:
        if c in " \t\r\n<>&\"'=/;!?()[]{}*|,+@$%^`~\\":
            return False
    return True


_ENT = {"lt": "<", "gt": ">", "amp": "&", "quot": '"', "apos": "'"}


def unescape(s):
    # Predefined entities and character references only (XML 1.0 §4.6); anything else is an
    # undeclared entity: we have no DTD, so it is an error, never an expansion.
    i = s.find("&")
    if i < 0:
        return s
    out = []
    j = 0
    while i >= 0:
        out.append(s[j:i])
        k = s.find(";", i)
        if k < 0 or k - i > 12:
            raise XMLError("unterminated entity")
        name = s[i + 1:k]
        if name[:2] == "#x":
            out.append(_chr(name[2:], 16))
        elif name[:1] == "#":
            out.append(_chr(name[1:], 10))
        else:
            v = _ENT.get(name)
            if v is None:
                raise XMLError("undeclared entity &%s; (no DTD)" % name)
            out.append(v)
        j = k + 1
        i = s.find("&", j)
    out.append(s[j:])
    return "".join(out)


def _chr(digits, base):
    try:
        return chr(int(digits, base))
    except (ValueError, OverflowError):
        raise XMLError("bad character reference %s" % digits)


def _dec(b):
    try:
        return str(b, "utf-8")
    except UnicodeError:
        raise XMLError("not UTF-8")


class Tokenizer:
    # Streaming tokenizer: next() returns START, END, TEXT or EOF and sets
    #   START: name (qname str), attrs (list of (qname, value) or None), empty (bool),
    #          pos (offset of '<'), end (offset after '>')
    #   END:   name, pos, end
    #   TEXT:  text (decoded, entities resolved; CDATA included verbatim)
    def __init__(self, buf, max_attrs=16):
        self.buf = buf
        self.i = 3 if buf[:3] == b"\xef\xbb\xbf" else 0
        self.max_attrs = max_attrs
        self.name = None
        self.attrs = None
        self.text = None
        self.empty = False
        self.pos = 0
        self.end = 0

    def next(self):
        b = self.buf
        n = len(b)
        while True:
            i = self.i
            if i >= n:
                return EOF
            if b[i] != _LT:
                j = b.find(b"<", i)
                if j < 0:
                    j = n
                self.i = j
                self.pos = i
                t = _dec(b[i:j])
                if "]]>" in t:
                    raise XMLError("']]>' in text")
                self.text = unescape(t)
                return TEXT
            if i + 1 >= n:
                raise XMLError("truncated at byte %d" % i)
            c = b[i + 1]
            if c == _SL:
                j = b.find(b">", i)
                if j < 0:
                    raise XMLError("truncated at byte %d" % i)
                self.name = _dec(b[i + 2:j]).strip()
                self.pos = i
                self.end = self.i = j + 1
                return END
            if c == _QM:
                j = b.find(b"?>", i)
                if j < 0:
                    raise XMLError("truncated at byte %d" % i)
                self.i = j + 2
                continue
            if c == _EX:
                if b[i:i + 4] == b"<!--":
                    j = b.find(b"-->", i + 4)
                    if j < 0:
                        raise XMLError("truncated at byte %d" % i)
                    self.i = j + 3
                    continue
                if b[i:i + 9] == b"<![CDATA[":
                    j = b.find(b"]]>", i + 9)
                    if j < 0:
                        raise XMLError("truncated at byte %d" % i)
                    self.text = _dec(b[i + 9:j])
                    self.pos = i
                    self.i = j + 3
                    return TEXT
                if b[i + 2:i + 9] in (b"DOCTYPE", b"doctype"):
                    raise XMLError("DOCTYPE not allowed")
                raise XMLError("bad '<!' at byte %d" % i)
            return self._start(b, i, n)

    def _start(self, b, i, n):
        # <name (ws attr ws? = ws? "value")* ws? /?>
        j = i + 1
        while j < n:
            c = b[j]
            if c == _GT or c == _SL or _ws(c):
                break
            j += 1
        self.name = _dec(b[i + 1:j])
        attrs = None
        while True:
            while j < n and _ws(b[j]):
                j += 1
            if j >= n:
                raise XMLError("truncated at byte %d" % i)
            c = b[j]
            if c == _GT:
                self.empty = False
                j += 1
                break
            if c == _SL:
                if j + 1 >= n or b[j + 1] != _GT:
                    raise XMLError("bad '/' in <%s" % self.name)
                self.empty = True
                j += 2
                break
            k = j
            while k < n:
                c = b[k]
                if c == _EQ or _ws(c) or c == _GT or c == _SL:
                    break
                k += 1
            an = _dec(b[j:k])
            while k < n and _ws(b[k]):
                k += 1
            if k >= n or b[k] != _EQ:
                raise XMLError("bad attribute %s in <%s" % (an, self.name))
            k += 1
            while k < n and _ws(b[k]):
                k += 1
            if k >= n or (b[k] != 34 and b[k] != 39):
                raise XMLError("unquoted attribute %s in <%s" % (an, self.name))
            q = b[k:k + 1]
            e = b.find(q, k + 1)
            if e < 0:
                raise XMLError("truncated at byte %d" % i)
            v = _dec(b[k + 1:e])
            if "<" in v:
                raise XMLError("bad attribute %s in <%s" % (an, self.name))
            if attrs is None:
                attrs = []
            elif len(attrs) >= self.max_attrs:
                raise XMLError("too many attributes in <%s" % self.name)
            # attribute-value normalisation (XML 1.0 §3.3.3) for literal whitespace
            if "\n" in v or "\t" in v or "\r" in v:
                v = v.replace("\r\n", " ").replace("\n", " ").replace("\t", " ").replace("\r", " ")
            attrs.append((an, unescape(v)))
            j = e + 1
            if j < n and not (_ws(b[j]) or b[j] == _GT or b[j] == _SL):
                raise XMLError("bad attribute %s in <%s" % (an, self.name))
        self.attrs = attrs
        self.pos = i
        self.end = self.i = j
        return START


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
        self.start = start
        self.end = start

    def get(self, key, default=None):
        a = self.attrs
        if a is None:
            return default
        return a.get(key, default)

    def find(self, ns, name):
        for c in self.children:
            if c.name == name and c.ns == ns:
                return c
        return None

    def findall(self, ns, name):
        return [c for c in self.children if c.name == name and c.ns == ns]

    def value(self):
        return self.text.strip()

    def qname(self):
        return "{%s}%s" % (self.ns, self.name)

    def resolve(self, qname):
        # A QName in content (e.g. a TopicExpression): (namespace, local); the prefix must be
        # in scope here. An unprefixed name takes the default namespace, or '' if none.
        p, _, local = qname.rpartition(":")
        uri = self.scope.get(p)
        if uri is None:
            if p:
                raise XMLError("undeclared prefix %s" % p)
            uri = ""
        return uri, local


_BASE_SCOPE = {"xml": XML_NS}


def _split(qname, scope, attr):
    p, _, local = qname.rpartition(":")
    if not is_name(local) or (p and not is_name(p)):
        raise XMLError("bad name %s" % qname)
    if not p:
        return ("" if attr else scope.get("", "")), local, ""
    uri = scope.get(p)
    if uri is None:
        raise XMLError("undeclared prefix %s" % p)
    return uri, local, p


def parse(buf, max_depth=16, max_elements=256, max_attrs=16):
    # Parse a whole document (bytes) into its root Element. Raises XMLError with a reason a
    # human can act on for anything malformed, truncated or over the limits.
    if not isinstance(buf, (bytes, bytearray, memoryview)):
        buf = bytes(buf)
    t = Tokenizer(buf, max_attrs)
    stack = []
    root = None
    count = 0
    while True:
        ev = t.next()
        if ev == TEXT:
            if stack:
                top = stack[-1]
                top.text = t.text if not top.text else top.text + t.text
            elif t.text.strip():
                raise XMLError("text outside the root")
            continue
        if ev == START:
            if root is not None and not stack:
                raise XMLError("content after the root")
            count += 1
            if count > max_elements:
                raise XMLError("more than %d elements" % max_elements)
            if len(stack) >= max_depth:
                raise XMLError("nesting deeper than %d" % max_depth)
            scope = stack[-1].scope if stack else _BASE_SCOPE
            decl = None
            attrs = None
            raw = t.attrs
            if raw:
                for an, v in raw:
                    if an == "xmlns" or an[:6] == "xmlns:":
                        if decl is None:
                            decl = []
                            scope = dict(scope)
                        p = an[6:]
                        if p and not v:
                            raise XMLError("empty namespace for prefix %s" % p)
                        scope[p] = v
                        decl.append(p)
                for an, v in raw:
                    if an == "xmlns" or an[:6] == "xmlns:":
                        continue
                    uri, local, _ = _split(an, scope, True)
                    key = "{%s}%s" % (uri, local) if uri else local
                    if attrs is None:
                        attrs = {}
                    elif key in attrs:
                        raise XMLError("duplicate attribute %s" % an)
                    attrs[key] = v
            uri, local, p = _split(t.name, scope, False)
            el = Element(uri, local, p, attrs, scope, decl, t.pos)
            if stack:
                stack[-1].children.append(el)
            else:
                root = el
            if t.empty:
                el.end = t.end
            else:
                stack.append(el)
            continue
        if ev == END:
            if not stack:
                raise XMLError("unexpected end tag </%s>" % t.name)
            el = stack.pop()
            want = (el.prefix + ":" + el.name) if el.prefix else el.name
            if t.name != want:
                raise XMLError("end tag </%s> does not match <%s>" % (t.name, want))
            el.end = t.end
            continue
        # EOF
        if stack:
            raise XMLError("truncated: <%s> not closed" % stack[-1].name)
        if root is None:
            raise XMLError("no root element")
        return root


def outer_xml(el, buf):
    # The element's markup copied from buf, with declarations added for the namespace
    # bindings it inherits (so QNames in its content still resolve when it is moved).
    src = _dec(buf[el.start:el.end])
    extra = []
    own = el.decl or ()
    for p in el.scope:
        if p == "xml" or p in own:
            continue
        if p:
            extra.append(' xmlns:%s="%s"' % (p, escape_attr(el.scope[p])))
        else:
            extra.append(' xmlns="%s"' % escape_attr(el.scope[p]))
    if not extra:
        return src
    k = 1 + len(el.prefix) + (1 if el.prefix else 0) + len(el.name)
    return src[:k] + "".join(extra) + src[k:]


def inner_xml(el, buf):
    # The element's children (and text between them) with inherited declarations added to
    # each child; text is re-escaped.
    out = []
    if el.text.strip():
        out.append(escape(el.text.strip()))
    for c in el.children:
        out.append(outer_xml(c, buf))
    return "".join(out)


def escape(s):
    if "&" in s:
        s = s.replace("&", "&amp;")
    if "<" in s:
        s = s.replace("<", "&lt;")
    if ">" in s:
        s = s.replace(">", "&gt;")
    return s


def escape_attr(s):
    s = escape(s)
    if '"' in s:
        s = s.replace('"', "&quot;")
    return s
