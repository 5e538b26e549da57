"""Consumer address policy: the addresses the broker may send to (Subscribe consumers,
Demand publishers), and whether an address is the broker itself.

The policy is decided on the PARSED URL, never on its text (a text pattern like
`http://10.0.0.*` also matched `http://10.0.0.1@evil/` and `http://10.0.0.1.nip.io/`):

- scheme http or https; no userinfo (`user@host`) at all: it is never part of a
  consumer's identity and only serves to disguise the host;
- the host is an address (matched against CIDR ranges) or a name (matched against exact
  names or `*.suffix` rules); the port against the rule's port (any by default);
- the name is resolved again when the broker connects (`PolicyResolver`, the resolver of
  the delivery and demand HTTP clients), and it connects only to the resolved addresses
  the policy allows: DNS rebinding cannot turn an allowed name into a forbidden address.
  An allowed NAME never reaches a special address (loopback unless loopback consumers are
  allowed, link-local such as cloud metadata 169.254.169.254, unspecified, multicast,
  reserved); only an explicit CIDR rule can allow those.

Rule syntax (`--allow-consumer RULE`, repeatable; docs/gateway.md "Security"):
`[SCHEME://]HOST[:PORT]` with SCHEME http, https or * (default both), PORT a number or *
(default any), HOST one of: an address (`10.0.0.5`, `[fd00::5]`), a CIDR range
(`10.0.0.0/24`, `[fd00::/64]`), a name (`sensors.example.com`), a suffix
(`*.example.com`: names below example.com), or `*` (any host). For compatibility the old
fnmatch forms `http://10.0.0.*` (trailing `*` octets -> a CIDR range) and a trailing `/*`
are read as that; other wildcards and path patterns are refused at startup (a path
restriction cannot be kept, and silently dropping it would widen the policy).
"""

from __future__ import annotations

import asyncio
import ipaddress
import posixpath
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

import yarl
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

SCHEMES = frozenset({"http", "https"})
_DEFAULT_PORT = {"http": 80, "https": 443}
_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$")
_RULE = re.compile(
    r"^(?P<host>\[[^\]]*\]|[^:/\[\]]+(?:/\d{1,3}(?=$|[:/]))?)(?::(?P<port>\d{1,5}|\*))?"
    r"(?P<path>/.*)?$"
)
# characters no valid URL authority contains; parsers disagree about them (urlsplit vs
# yarl), which is how a policy check and the connection can see different hosts
_BAD_URL_CHARS = re.compile(r"[\x00-\x20\x7f\\^`{}|<>\"]")


class PolicyError(ValueError):
    """An --allow-consumer rule that cannot be read (message says how to write it)."""


@dataclass(frozen=True)
class Rule:
    """One allow rule; exactly one of `network`, `name`, `suffix` is set unless `any_host`."""

    text: str
    schemes: frozenset[str] = SCHEMES
    network: IPNetwork | None = None
    name: str | None = None
    suffix: str | None = None  # ".example.com"
    any_host: bool = False
    port: int | None = None  # None: any port

    def _scheme_port(self, scheme: str | None, port: int) -> bool:
        return (scheme is None or scheme in self.schemes) and self.port in (None, port)

    def allows_ip(self, scheme: str | None, ip: IPAddress, port: int) -> bool:
        if not self._scheme_port(scheme, port):
            return False
        if self.any_host:
            return True
        return (
            self.network is not None and ip.version == self.network.version and (ip in self.network)
        )

    def allows_name(self, scheme: str | None, name: str, port: int) -> bool:
        if not self._scheme_port(scheme, port):
            return False
        if self.any_host or name == self.name:
            return True
        return self.suffix is not None and name.endswith(self.suffix)


def _legacy_octets(host: str) -> IPNetwork | None:
    """`10.0.0.*`, `10.0.*.*`, `10.*` (old fnmatch forms) -> the CIDR range they meant."""
    parts = host.split(".")
    fixed: list[int] = []
    for i, p in enumerate(parts):
        if p == "*":
            if any(q != "*" for q in parts[i:]):
                return None
            break
        if not p.isdigit() or int(p) > 255:
            return None
        fixed.append(int(p))
    if len(fixed) == len(parts) or len(parts) > 4:
        return None
    return ipaddress.ip_network(".".join(map(str, fixed + [0] * (4 - len(fixed))))
                                + f"/{8 * len(fixed)}")  # fmt: skip


def parse_rule(text: str) -> Rule:
    """Read one --allow-consumer rule; PolicyError says what is wrong and what to write."""
    t = text.strip()
    schemes = SCHEMES
    if "://" in t:
        sch, t = t.split("://", 1)
        sch = sch.lower()
        if sch == "*":
            schemes = SCHEMES
        elif sch in SCHEMES:
            schemes = frozenset({sch})
        else:
            raise PolicyError(f"--allow-consumer {text!r}: scheme must be http, https or *")
    if t == "*" or t == "*/*":
        return Rule(text, schemes, any_host=True)
    if "@" in t:
        raise PolicyError(f"--allow-consumer {text!r}: user information (@) is not allowed")
    m = _RULE.match(t)
    if not m:
        raise PolicyError(
            f"--allow-consumer {text!r}: write [http://|https://]HOST[:PORT] with HOST an "
            "address, a CIDR range (10.0.0.0/24), a name or *.suffix"
        )
    host, port_s, path = m.group("host"), m.group("port"), m.group("path")
    if path not in (None, "/", "/*"):
        raise PolicyError(
            f"--allow-consumer {text!r}: the policy is on scheme, host and port; a path "
            f"pattern ({path}) cannot be enforced and is refused rather than dropped"
        )
    port = None if port_s in (None, "*") else int(port_s)
    if port is not None and not 0 < port < 65536:
        raise PolicyError(f"--allow-consumer {text!r}: port out of range")
    h = host[1:-1] if host.startswith("[") else host
    try:
        return Rule(text, schemes, network=ipaddress.ip_network(h, strict=False), port=port)
    except ValueError:
        pass
    legacy = _legacy_octets(h)
    if legacy is not None:
        return Rule(text, schemes, network=legacy, port=port)
    name = h.lower().rstrip(".")
    if name.startswith("*.") or name.startswith("."):
        suffix = "." + name.lstrip("*").lstrip(".")
        if _NAME.match(suffix[1:]):
            return Rule(text, schemes, suffix=suffix, port=port)
    elif _NAME.match(name) and not name.replace(".", "").isdigit():
        return Rule(text, schemes, name=name, port=port)
    raise PolicyError(
        f"--allow-consumer {text!r}: {h!r} is neither an address, a CIDR range, a host name "
        "nor *.suffix (other wildcards are no longer supported: they matched the URL text, "
        "which let http://10.0.0.1@evil/ and http://10.0.0.1.nip.io/ through)"
    )


def _special(ip: IPAddress) -> bool:
    """Addresses a NAME rule never reaches (only an explicit CIDR rule does)."""
    return (
        ip.is_loopback
        or ip.is_link_local
        or ip.is_unspecified
        or ip.is_multicast
        or ip.is_reserved
        or (isinstance(ip, ipaddress.IPv4Address) and ip == ipaddress.IPv4Address(
            "255.255.255.255"))
    )  # fmt: skip


def _ip(text: str) -> IPAddress | None:
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _is_local(ip: IPAddress) -> bool:
    """True if `ip` is an address of this host (binding to it succeeds)."""
    fam = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(fam, socket.SOCK_DGRAM) as s:
            s.bind((str(ip), 0))
        return True
    except OSError:
        return False


@dataclass(frozen=True)
class ConsumerAddress:
    """A consumer URL as the policy sees it: scheme, host (name or address), port, path."""

    scheme: str
    host: str  # lower case, no trailing dot, no brackets
    ip: IPAddress | None
    port: int
    path: str  # percent-decoded, dot segments removed

    @classmethod
    def parse(cls, address: str) -> ConsumerAddress | str:
        """The target, or the reason `address` is not an acceptable consumer URL."""
        if _BAD_URL_CHARS.search(address):
            return f"consumer address {address!r} contains characters no URL may contain"
        try:
            parts: SplitResult = urlsplit(address)
            port_opt = parts.port
        except ValueError:
            return f"consumer address {address!r} is not a URL"
        scheme = parts.scheme.lower()
        if scheme not in SCHEMES or not parts.hostname:
            return f"consumer address {address!r} is not an http(s) URL"
        if "@" in parts.netloc:
            return (
                f"consumer address {address!r} contains user information (user@host); "
                "consumer URLs must not carry credentials or a disguised host"
            )
        host = parts.hostname.rstrip(".")
        try:  # the HTTP client (yarl) must see the same host, or the check is moot
            yhost = (yarl.URL(address).host or "").lower().strip("[]").rstrip(".")
        except (ValueError, TypeError):
            yhost = ""
        if yhost != host and _ip(yhost) != _ip(host):
            return f"consumer address {address!r} is ambiguous (URL parsers disagree on its host)"
        port = port_opt if port_opt is not None else _DEFAULT_PORT[scheme]
        path = posixpath.normpath("/" + unquote(parts.path or "/")).replace("//", "/")
        return cls(scheme, host, _ip(host), port, path)


class ConsumerPolicy:
    """Allow rules + loopback default + the broker's own identity."""

    def __init__(self, rules: Iterable[Rule], allow_loopback: bool = True) -> None:
        self.rules = list(rules)
        self.allow_loopback = allow_loopback
        self.own_port: int | None = None
        self.own_names: set[tuple[str, int]] = set()  # (host name or address, port)

    @classmethod
    def from_texts(cls, texts: Iterable[str], allow_loopback: bool = True) -> ConsumerPolicy:
        return cls([parse_rule(t) for t in texts], allow_loopback)

    # ---- the broker's own identity (defect: it subscribed to itself, WS-BaseNotification
    # §4.2 says nothing of it; a loop is never what a client meant)
    def set_self(self, port: int, names: Iterable[tuple[str, int]]) -> None:
        self.own_port = port
        for host, p in names:
            self.add_self_name(host, p)

    def add_self_name(self, host: str, port: int) -> None:
        self.own_names.add((host.lower().strip("[]").rstrip("."), port))

    def is_self_ip(self, ip: IPAddress, port: int) -> bool:
        if port != self.own_port:
            return False
        return ip.is_loopback or ip.is_unspecified or _is_local(ip)

    async def refers_to_self(self, t: ConsumerAddress, resolve_timeout: float = 2.0) -> bool:
        """True if `t` names this broker: its listening port on one of this host's
        addresses (any loopback spelling, after resolving names), or a name it is known by
        (listening host, --public-url). Not the Host headers it was reached with: they are
        client-chosen and would let a client block any address. Unresolvable names are
        not self here; the delivery-time resolver checks them again."""
        if (t.host, t.port) in self.own_names:
            return True
        if t.ip is not None:
            return self.is_self_ip(t.ip, t.port)
        if t.port != self.own_port:
            return False
        try:
            async with asyncio.timeout(resolve_timeout):
                loop = asyncio.get_running_loop()
                infos = await loop.getaddrinfo(t.host, t.port, type=socket.SOCK_STREAM)
        except (OSError, TimeoutError, UnicodeError):
            return False
        for *_x, sa in infos:
            ip = _ip(str(sa[0]))
            if ip is not None and self.is_self_ip(ip, t.port):
                return True
        return False

    # ---- the allow decision
    def ip_allowed(self, scheme: str | None, ip: IPAddress, port: int, name: str | None) -> bool:
        if any(r.allows_ip(scheme, ip, port) for r in self.rules if not r.any_host):
            return True  # an explicit CIDR rule allows even special addresses
        if self.allow_loopback and ip.is_loopback:
            return True
        if _special(ip):
            return False
        if any(r.any_host and r.allows_ip(scheme, ip, port) for r in self.rules):
            return True
        return name is not None and self.name_allowed(scheme, name, port)

    def name_allowed(self, scheme: str | None, name: str, port: int) -> bool:
        if self.allow_loopback and (name == "localhost" or name.endswith(".localhost")):
            return True
        return any(r.allows_name(scheme, name, port) for r in self.rules)

    def check(self, address: str) -> str | None:
        """None if the broker may send to `address` (before resolution), else the reason."""
        t = ConsumerAddress.parse(address)
        if isinstance(t, str):
            return t
        return self.check_target(t, address)

    def check_target(self, t: ConsumerAddress, address: str) -> str | None:
        if t.ip is not None:
            ok = self.ip_allowed(t.scheme, t.ip, t.port, None)
        else:
            ok = self.name_allowed(t.scheme, t.host, t.port)
        if ok:
            return None
        return (
            f"consumer address {address!r} is not allowed by the broker's consumer address "
            "policy (loopback only by default; the operator can add --allow-consumer with a "
            "CIDR range, a host name or *.suffix)"
        )


class PolicyResolver(AbstractResolver):
    """aiohttp resolver that returns only the addresses the policy allows for that name
    (and never the broker itself): the check and the connection use the same addresses,
    so DNS rebinding between them is impossible. aiohttp does not call a resolver for
    address literals; those are checked before each request (ConsumerPolicy.check)."""

    def __init__(self, policy: ConsumerPolicy, inner: AbstractResolver | None = None) -> None:
        self.policy = policy
        self.inner = inner or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self.inner.resolve(host, port, family)
        name = host.lower().rstrip(".")
        keep: list[ResolveResult] = []
        refused: list[str] = []
        for r in results:
            ip = _ip(r["host"])
            if (
                ip is not None
                and self.policy.ip_allowed(None, ip, port, name)
                and not self.policy.is_self_ip(ip, port)
            ):
                keep.append(r)
            else:
                refused.append(r["host"])
        if not keep:
            raise OSError(
                f"{host} resolved to {', '.join(refused) or 'nothing'}, which the consumer "
                "address policy forbids (or which is this broker)"
            )
        return keep

    async def close(self) -> None:
        await self.inner.close()


def connector_kwargs(policy: ConsumerPolicy) -> dict[str, Any]:
    """TCPConnector arguments that route name resolution through the policy."""
    return {"resolver": PolicyResolver(policy)}
