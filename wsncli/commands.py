"""The `wsn` commands other than `sub`: pub (Notify), pull (GetMessages), renew,
unsubscribe, pause, resume (on a subscription's EPR address), rm (end a subscription, pull
point or publisher registration), topics (the producer's wstop:TopicSet as a tree) and ls
(a wsn-edge gateway's /status.json)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TextIO
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from lxml import etree

from wsncli import messages
from wsncli.sub import check_prefixes
from wsncli.wsp import (
    A_DESTROY,
    A_DESTROY_PP,
    A_DESTROY_REG,
    A_GET_MESSAGES,
    A_GET_RP,
    A_NOTIFY,
    A_PAUSE,
    A_RENEW,
    A_RESUME,
    A_UNSUBSCRIBE,
    BR,
    DIALECTS,
    EDGE,
    WSA,
    WSNT,
    WSRF_RL,
    WSRF_RP,
    WSTOP,
    Client,
    WsnError,
    connect_error,
    expression,
    q,
    wsnt,
)

_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, remove_blank_text=True)


# ---------------------------------------------------------------------- pub
def parse_message(text: str) -> etree._Element:
    try:
        el = etree.fromstring(text.strip().encode(), _PARSER)
    except etree.XMLSyntaxError as e:
        raise WsnError(
            f"the message is not one XML element ({e.msg}); e.g. --message "
            "'<r:Reading xmlns:r=\"urn:example\">21.5</r:Reading>'"
        ) from None
    return el


def notify_body(
    topic: str, dialect: str, nsmap: dict[str, str], payloads: list[etree._Element],
    producer: str | None,
) -> etree._Element:  # fmt: skip
    notify = wsnt("Notify")
    for p in payloads:
        nm = etree.SubElement(notify, q(WSNT, "NotificationMessage"))
        nm.append(expression(q(WSNT, "Topic"), DIALECTS[dialect], topic, nsmap))
        if producer:
            pr = etree.SubElement(nm, q(WSNT, "ProducerReference"))
            etree.SubElement(pr, q(WSA, "Address")).text = producer
        etree.SubElement(nm, q(WSNT, "Message")).append(p)
    return notify


def message_lines(message: str, stdin: TextIO) -> Iterator[str]:
    """`--message -`: one message per non-empty line of stdin, as they come."""
    if message != "-":
        yield message
        return
    for line in stdin:
        if line.strip():
            yield line


async def pub(
    client: Client, broker: str, topic: str, dialect: str, nsmap: dict[str, str],
    message: str, producer: str | None, stdin: TextIO = sys.stdin,
) -> int:  # fmt: skip
    """One Notify per message (so `tail -f log | wsn pub ... -m -` publishes live)."""
    check_prefixes(topic, dialect, nsmap)
    if dialect not in ("simple", "concrete"):
        # WS-BaseNotification 1.3 §3.2: the Topic of a NotificationMessage names one topic
        raise WsnError(
            f"a published topic must be one concrete topic: use --dialect concrete "
            f"(or simple), not {dialect}"
        )
    for text in message_lines(message, stdin):
        body = notify_body(topic, dialect, nsmap, [parse_message(text)], producer)
        await client.call(broker, A_NOTIFY, body)
    return 0


# ---------------------------------------------------------------------- pull
async def pull(
    client: Client, pullpoint: str, maximum: int | None, wait: float, as_json: bool
) -> int:
    gm = wsnt("GetMessages", {"edge": EDGE})
    if maximum is not None:
        etree.SubElement(gm, q(WSNT, "MaximumNumber")).text = str(maximum)
    if wait > 0:
        etree.SubElement(gm, q(EDGE, "Wait")).text = f"PT{wait:g}S"
    resp = await client.call(pullpoint, A_GET_MESSAGES, gm, extra_wait=wait)
    for n in messages.notifications(resp) if resp is not None else []:
        print(n.json() if as_json else n.line(), flush=True)
    return 0


# ---------------------------------------------------------------------- manager ops
async def renew(client: Client, subscription: str, termination: str) -> int:
    body = wsnt("Renew")
    etree.SubElement(body, q(WSNT, "TerminationTime")).text = termination
    resp = await client.call(subscription, A_RENEW, body)
    tt = resp.findtext(q(WSNT, "TerminationTime")) if resp is not None else None
    print(f"renewed until {tt.strip() if tt and tt.strip() else 'no termination time'}")
    return 0


async def manage(client: Client, subscription: str, what: str) -> int:
    """unsubscribe, pause or resume."""
    local, action, done = {
        "unsubscribe": ("Unsubscribe", A_UNSUBSCRIBE, "unsubscribed"),
        "pause": ("PauseSubscription", A_PAUSE, "paused"),
        "resume": ("ResumeSubscription", A_RESUME, "resumed"),
    }[what]
    await client.call(subscription, action, wsnt(local))
    print(done)
    return 0


# ---------------------------------------------------------------------- rm
#: what ends each kind of resource (WS-BaseNotification 1.3 §6.3 Unsubscribe, §5.1.4
#: DestroyPullPoint; WS-BrokeredNotification 1.3 DestroyRegistration; WS-ResourceLifetime
#: Destroy for any other WS-Resource): (what, the word its address path may hold, action,
#: request element)
_ENDINGS = (
    ("subscription", "subscription", A_UNSUBSCRIBE, q(WSNT, "Unsubscribe")),
    ("pull point", "pullpoint", A_DESTROY_PP, q(WSNT, "DestroyPullPoint")),
    ("publisher registration", "registration", A_DESTROY_REG, q(BR, "DestroyRegistration")),
    ("resource", "", A_DESTROY, q(WSRF_RL, "Destroy")),
)


async def rm(client: Client, url: str) -> int:
    """End what `url` (an EPR address) is: the request its path suggests first (the
    gateway's /wsn/subscriptions/, /pullpoints/, /registrations/), then the others; the
    first one the endpoint accepts ends it. Unreachable or unauthorized: that error."""
    path = urlsplit(url).path.lower().replace("-", "").replace("_", "")
    order = sorted(_ENDINGS, key=lambda e: not (e[1] and e[1] in path))
    refusals = []
    for what, _hint, action, tag in order:
        body = etree.Element(tag, nsmap={"x": etree.QName(tag).namespace or ""})
        try:
            await client.call(url, action, body)
        except WsnError as e:
            if e.fault is None:  # not a SOAP fault: cannot connect, 401, HTTP errors
                raise
            refusals.append(f"{etree.QName(tag).localname}: {e.fault}")
            continue
        print(f"removed the {what}")
        return 0
    raise WsnError(f"{url} ended with none of the requests ({'; '.join(refusals)})")


# ---------------------------------------------------------------------- topics
async def topics(client: Client, producer: str) -> int:
    """GetResourceProperty wstop:TopicSet (WS-BaseNotification 1.3 §4.1, WS-Topics 1.3
    §9), printed as a tree per namespace; `*` marks the topics themselves
    (wstop:topic="true"), the other names only structure the tree."""
    body = etree.Element(
        q(WSRF_RP, "GetResourceProperty"), nsmap={"wsrf-rp": WSRF_RP, "wstop": WSTOP}
    )
    body.text = "wstop:TopicSet"
    resp = await client.call(producer, A_GET_RP, body)
    ts = resp.find(q(WSTOP, "TopicSet")) if resp is not None else None
    if ts is None:
        raise WsnError(f"{producer} answered without a wstop:TopicSet")
    for line in topic_tree(ts):
        print(line)
    return 0


def topic_tree(ts: etree._Element) -> list[str]:
    by_ns: dict[str, list[etree._Element]] = {}
    for root in ts:
        if isinstance(root.tag, str):
            by_ns.setdefault(etree.QName(root).namespace or "", []).append(root)
    out: list[str] = []
    for tns in sorted(by_ns):
        out.append(tns or "(no namespace)")
        for root in sorted(by_ns[tns], key=lambda e: etree.QName(e).localname):
            out.extend(_branch(root, 1))
    if not out:
        out.append("(no topics yet)")
    return out


def _branch(el: etree._Element, depth: int) -> Iterable[str]:
    mark = " *" if el.get(q(WSTOP, "topic")) in ("true", "1") else ""
    yield "  " * depth + etree.QName(el).localname + mark
    kids = [c for c in el if isinstance(c.tag, str)]
    for c in sorted(kids, key=lambda e: etree.QName(e).localname):
        yield from _branch(c, depth + 1)


# ---------------------------------------------------------------------- ls
def status_url(broker: str) -> str:
    u = urlsplit(broker)
    if u.scheme not in ("http", "https") or not u.netloc:
        raise WsnError(f"{broker!r} is not an http(s) URL")
    return urlunsplit((u.scheme, u.netloc, "/status.json", "", ""))


async def ls(client: Client, broker: str, as_json: bool) -> int:
    url = status_url(broker)
    headers = {"Authorization": client.authorization} if client.authorization else {}
    try:
        async with client.session.get(
            url, headers=headers, timeout=aiohttp.ClientTimeout(total=client.timeout)
        ) as r:
            text = await r.text()
            status = r.status
    except aiohttp.ClientConnectorError as e:
        raise WsnError(f"cannot connect to {url}: {connect_error(e)}") from None
    except (aiohttp.ClientError, TimeoutError) as e:
        raise WsnError(f"GET {url} failed: {e or type(e).__name__}") from None
    if status == 401:
        raise WsnError(f"{url} needs the gateway's credentials: pass --token (or WSN_TOKEN)")
    if status == 403:
        raise WsnError(f"{url}: {text.strip()}")
    if status == 404:
        raise WsnError(f"{url} does not exist: `wsn ls` needs a wsn-edge gateway")
    if status != 200:
        raise WsnError(f"GET {url}: HTTP {status}: {text.strip()[:200]}")
    try:
        snap: dict[str, Any] = json.loads(text)
    except ValueError:
        raise WsnError(f"{url} did not answer JSON: is it a wsn-edge gateway?") from None
    if as_json:
        print(json.dumps(snap, indent=1))
    else:
        for line in render_ls(snap):
            print(line)
    return 0


def render_ls(s: dict[str, Any]) -> list[str]:
    out: list[str] = []
    g = s.get("gateway", {})
    out.append(
        f"gateway {g.get('gateway_id') or ''} {g.get('broker', '')} version {g.get('version')} "
        f"up {g.get('uptime_s')} s, accepted {g.get('accepted')}".replace("  ", " ")
    )
    out.append(f"registrations ({len(s.get('registrations', []))})")
    for r in s.get("registrations", []):
        out.append(
            f"  {r.get('device_id') or r['id']}  {r.get('state')}  {r.get('producer') or '-'}  "
            f"topics={','.join(r.get('topic_texts') or r.get('topics', []))}  "
            f"last_seen={r.get('last_seen') or 'never'}"
        )
    out.append(f"subscriptions ({len(s.get('subscriptions', []))})")
    for x in s.get("subscriptions", []):
        where = f"pullpoint:{x['pullpoint']}" if x.get("pullpoint") else x.get("consumer")
        out.append(
            f"  {x['id']}  {x.get('dialect') or '-'}:{x.get('expression') or '*'}  -> {where}  "
            f"{'raw' if x.get('raw') else 'wrapped'}{'  PAUSED' if x.get('paused') else ''}  "
            f"backlog={x.get('backlog')} failures={x.get('failures')} "
            f"expires={x.get('expires') or 'never'}"
        )
    out.append(f"pullpoints ({len(s.get('pullpoints', []))})")
    for p in s.get("pullpoints", []):
        out.append(f"  {p['id']}  depth={p.get('depth')} dropped={p.get('dropped')}")
    cams = s.get("cameras") or []
    if cams:  # ONVIF cameras (gateway --onvif-camera)
        out.append(f"cameras ({len(cams)})")
    for c in cams:
        err = f"  last_error={c.get('last_error')!r}" if c.get("last_error") else ""
        out.append(
            f"  {c['id']}  {'connected' if c.get('connected') else c.get('state')}  "
            f"{c.get('address')}  expires={c.get('expires') or '-'}  "
            f"last_event={c.get('last_event') or 'never'}  events={c.get('events')}  "
            f"errors={c.get('errors')}{err}"
        )
    land = s.get("landing", {})
    if land.get("enabled"):
        out.append(
            f"landing {land.get('current_file') or '(no open file)'} "
            f"{land.get('current_bytes')} B, "
            f"lag {land.get('lag_rows')} rows / {land.get('lag_s')} s"
        )
    else:
        out.append("landing disabled")
    return out
