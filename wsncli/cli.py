"""`wsn` argument parsing and the error policy: every failure is one line on stderr,
`wsn: <what went wrong and what to do>`, exit status 1 (2 for a usage mistake); a
traceback would mean a bug in `wsn`."""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
from collections.abc import Awaitable, Callable
from typing import NoReturn

import aiohttp

from wsncli import commands, sub
from wsncli.wsp import DIALECTS, Client, WsnError

MAIN_EXAMPLES = """\
examples:
  wsn sub http://gw:8080/wsn/broker 'dev:*/temperature' --dialect full \\
      --ns dev=urn:wsn-edge:devices --json
  wsn pub http://gw:8080/wsn/broker tns:alarms --ns tns=urn:example \\
      --message '<a:Alarm xmlns:a="urn:example">door</a:Alarm>'
  wsn topics http://gw:8080/wsn/broker
  wsn ls http://gw:8080/wsn/broker
  wsn pause http://gw:8080/wsn/subscriptions/0f3c...   (an EPR address)
  wsn rm http://gw:8080/wsn/pullpoints/5c1e...          (a pull point left behind)

Credentials for management operations: --token TOKEN (or env WSN_TOKEN) sends
`Authorization: Bearer`, --user/--password (or env WSN_PASSWORD) HTTP Basic.
Each command has its own --help with examples."""

SUB_EXAMPLES = """\
examples:
  # every temperature of every device (Full dialect), one JSON object per line
  wsn sub http://gw:8080/wsn/broker 'dev:*/temperature' --dialect full \\
      --ns dev=urn:wsn-edge:devices --json
  # the first 10 readings above 30 degrees, then clean up and exit
  wsn sub http://gw:8080/wsn/broker 'dev:esp32-01/temperature' --ns dev=urn:wsn-edge:devices \\
      --filter '//r:value > 30' --ns r=urn:wsn-edge:reading --count 10
  # straight from a device (a producer; Simple dialect)
  wsn sub http://192.168.1.50:8081/wsn/producer dt:temperature --dialect simple \\
      --ns dt=urn:wsn-edge:device-topics
  # push instead of pull: the broker must reach this address
  wsn sub http://gw:8080/wsn/broker tns:a --ns tns=urn:example --push 192.168.1.20:8099

Output: `TOPIC PAYLOAD-XML` per line, or with --json an object with topic, topic_namespace,
producer, subscription, message (the payload XML) and received. On --count, Ctrl-C or
SIGTERM the subscription is unsubscribed and the pull point destroyed."""

PUB_EXAMPLES = """\
examples:
  wsn pub http://gw:8080/wsn/broker tns:alarms --ns tns=urn:example \\
      --message '<a:Alarm xmlns:a="urn:example">door open</a:Alarm>'
  # one message per line of stdin, each published as it is read
  tail -f alarms.xml | wsn pub http://gw:8080/wsn/broker tns:alarms --ns tns=urn:example -m -"""


class _Parser(argparse.ArgumentParser):
    """Usage mistakes in one line, with where to look."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _ns(text: str) -> tuple[str, str]:
    prefix, sep, uri = text.partition("=")
    if not sep or not prefix or not uri:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected PREFIX=URI, e.g. dev=urn:wsn-edge:devices"
        )
    return prefix, uri


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1")
    return n


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected seconds, e.g. 20 or 0.5")
    return v


def build_parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    p = _Parser(
        prog="wsn",
        description="Command-line client for WS-Notification brokers and producers "
        "(WS-BaseNotification 1.3, WS-BrokeredNotification 1.3, WS-Topics 1.3).",
        epilog=MAIN_EXAMPLES,
        formatter_class=raw,
    )
    common = _Parser(add_help=False)
    g = common.add_argument_group("connection")
    g.add_argument("--token", help="bearer token (or env WSN_TOKEN)")
    g.add_argument("--user", help="HTTP Basic user")
    g.add_argument("--password", help="HTTP Basic password (or env WSN_PASSWORD)")
    g.add_argument("--timeout", type=_seconds, default=30.0, help="seconds per request (30)")
    nsopt = _Parser(add_help=False)
    nsopt.add_argument(
        "--ns", type=_ns, action="append", default=[], metavar="PREFIX=URI",
        help="declare a namespace prefix used in the topic or filter (repeatable)",
    )  # fmt: skip
    sp = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    s = sp.add_parser(
        "sub", parents=[common, nsopt], help="subscribe and print notifications",
        description="Subscribe at BROKER_URL (a broker or a producer) and print each "
        "notification as it arrives.", epilog=SUB_EXAMPLES, formatter_class=raw,
    )  # fmt: skip
    s.add_argument("broker", metavar="BROKER_URL")
    s.add_argument("topic", metavar="TOPIC_EXPR")
    s.add_argument("--dialect", choices=list(DIALECTS), default="concrete")
    s.add_argument("--filter", metavar="XPATH", help="MessageContent filter (XPath 1.0)")
    s.add_argument("--raw", action="store_true", help="ask for raw delivery (UseRaw)")
    s.add_argument("--count", type=_positive, help="exit after N notifications")
    s.add_argument("--json", action="store_true", help="one JSON object per line")
    s.add_argument("--push", metavar="HOST:PORT", help="run a local consumer instead of pulling")
    s.add_argument("--lifetime", type=_seconds, default=600.0,
                   help="subscription lifetime asked, renewed at half of it (600 s)")  # fmt: skip
    s.add_argument("--wait", type=_seconds, default=20.0, help="long-poll seconds (20)")
    s.add_argument(
        "--interval", type=_seconds, default=1.0,
        help="pause after an empty GetMessages a broker answered at once (1 s)",
    )  # fmt: skip

    pb = sp.add_parser(
        "pub", parents=[common, nsopt], help="publish (Notify)",
        description="Send a wsnt:Notify to BROKER_URL on TOPIC (one concrete topic).",
        epilog=PUB_EXAMPLES, formatter_class=raw,
    )  # fmt: skip
    pb.add_argument("broker", metavar="BROKER_URL")
    pb.add_argument("topic", metavar="TOPIC")
    pb.add_argument("--dialect", choices=["simple", "concrete"], default="concrete")
    pb.add_argument("-m", "--message", required=True, metavar="XML",
                    help="the payload element, or - for stdin (one message per line)")  # fmt: skip
    pb.add_argument("--producer", metavar="URL", help="ProducerReference address to send")

    pl = sp.add_parser(
        "pull", parents=[common], help="GetMessages from a pull point",
        description="Take the messages waiting in a pull point (its EPR address).",
        epilog="example:\n  wsn pull http://gw:8080/wsn/pullpoints/5c1e... --max 10 --wait 5",
        formatter_class=raw,
    )  # fmt: skip
    pl.add_argument("pullpoint", metavar="PULLPOINT_URL")
    pl.add_argument("--max", type=_positive, help="MaximumNumber")
    pl.add_argument("--wait", type=_seconds, default=0.0, help="long-poll seconds (wsn-edge)")
    pl.add_argument("--json", action="store_true")

    r = sp.add_parser(
        "renew", parents=[common], help="Renew a subscription",
        description="Renew the subscription at SUBSCRIPTION_URL (its EPR address).",
        epilog="examples:\n  wsn renew http://gw:8080/wsn/subscriptions/0f3c... PT1H\n"
        "  wsn renew http://gw:8080/wsn/subscriptions/0f3c... 2026-12-01T00:00:00Z",
        formatter_class=raw,
    )  # fmt: skip
    r.add_argument("subscription", metavar="SUBSCRIPTION_URL")
    r.add_argument("termination", metavar="WHEN", help="xsd:duration (PT1H) or xsd:dateTime")
    for name, what in (("unsubscribe", "Unsubscribe"), ("pause", "PauseSubscription"),
                       ("resume", "ResumeSubscription")):  # fmt: skip
        m = sp.add_parser(
            name, parents=[common], help=f"{what} on a subscription's EPR address",
            description=f"Send wsnt:{what} to SUBSCRIPTION_URL.",
            epilog=f"example:\n  wsn {name} http://gw:8080/wsn/subscriptions/0f3c... --token $T",
            formatter_class=raw,
        )  # fmt: skip
        m.add_argument("subscription", metavar="SUBSCRIPTION_URL")

    rm = sp.add_parser(
        "rm", parents=[common], help="end a subscription, pull point or registration",
        description="End what URL (an EPR address) is: a subscription (Unsubscribe), a pull "
        "point (DestroyPullPoint), a publisher registration (DestroyRegistration) or "
        "another WS-Resource (wsrf-rl:Destroy); what its path names is tried first.",
        epilog="examples:\n  wsn rm http://gw:8080/wsn/pullpoints/5c1e... --token $T\n"
        "  wsn rm http://gw:8080/wsn/registrations/9a07... --token $T",
        formatter_class=raw,
    )  # fmt: skip
    rm.add_argument("url", metavar="URL")

    t = sp.add_parser(
        "topics", parents=[common], help="the producer's topic set as a tree",
        description="Print the wstop:TopicSet of BROKER_URL (GetResourceProperty); "
        "* marks topics, other names only structure the tree.",
        epilog="example:\n  wsn topics http://gw:8080/wsn/broker", formatter_class=raw,
    )  # fmt: skip
    t.add_argument("broker", metavar="BROKER_URL")

    ls = sp.add_parser(
        "ls", parents=[common], help="what a wsn-edge gateway holds (/status.json)",
        description="List registrations, subscriptions, pull points and the landing zone "
        "of a wsn-edge gateway (its /status.json; loopback only unless the gateway has "
        "--auth-token, then pass --token, or --status-public).",
        epilog="example:\n  wsn ls http://127.0.0.1:8080/wsn/broker", formatter_class=raw,
    )  # fmt: skip
    ls.add_argument("broker", metavar="BROKER_URL")
    ls.add_argument("--json", action="store_true", help="the JSON as the gateway sent it")
    return p


def _authorization(a: argparse.Namespace) -> str | None:
    token = a.token or os.environ.get("WSN_TOKEN")
    if token:
        return f"Bearer {token}"
    password = a.password or os.environ.get("WSN_PASSWORD")
    if a.user and password is not None:
        return "Basic " + base64.b64encode(f"{a.user}:{password}".encode()).decode()
    if a.user:
        raise WsnError("--user needs --password (or env WSN_PASSWORD)")
    return None


def _command(a: argparse.Namespace, client: Client) -> Awaitable[int]:
    nsmap = dict(getattr(a, "ns", []))
    table: dict[str, Callable[[], Awaitable[int]]] = {
        "sub": lambda: sub.run(
            client,
            sub.SubOptions(
                a.broker,
                a.topic,
                a.dialect,
                nsmap,
                a.filter,
                a.raw,
                a.count,
                a.json,
                a.push,
                a.lifetime,
                a.wait,
                a.interval,
            ),
        ),
        "pub": lambda: commands.pub(
            client, a.broker, a.topic, a.dialect, nsmap, a.message, a.producer
        ),
        "pull": lambda: commands.pull(client, a.pullpoint, a.max, a.wait, a.json),
        "renew": lambda: commands.renew(client, a.subscription, a.termination),
        "unsubscribe": lambda: commands.manage(client, a.subscription, "unsubscribe"),
        "pause": lambda: commands.manage(client, a.subscription, "pause"),
        "resume": lambda: commands.manage(client, a.subscription, "resume"),
        "rm": lambda: commands.rm(client, a.url),
        "topics": lambda: commands.topics(client, a.broker),
        "ls": lambda: commands.ls(client, a.broker, a.json),
    }
    return table[a.command]()


async def _run(a: argparse.Namespace) -> int:
    auth = _authorization(a)
    async with aiohttp.ClientSession() as session:
        return await _command(a, Client(session, auth, a.timeout))


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        return asyncio.run(_run(a))
    except WsnError as e:
        print(f"wsn: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before the subscription's own handler was installed
        return 130
