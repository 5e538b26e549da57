"""Check a device config before it goes on a board (flash.sh runs this; Python 3.8+, stdlib only).

    python3 tools/micropython/check_config.py CONFIG.json [--topics TOPICS.xml] [--schema S]

Checks the config against the device's schema (device/config.schema.json: every key, its type
and range; a key the device does not read is an error, so a typo is caught here and not on the
board) and against the topic namespace the board gets (every sensor topic is one of its root
topics), plus what one key implies for another (an adc sensor needs its pin, sleepy mode a
gateway). Warns about the example's secret and Wi-Fi placeholders.

Prints, one per line on stdout, the optional packages the config needs (`package wsn/wifi`);
problems go to stderr. Exit status: 0 fine (warnings allowed), 2 the config is wrong, 3 the
schema or the topics file cannot be read."""

from __future__ import annotations

import argparse
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WSTOP = "http://docs.oasis-open.org/wsn/t-1"
# values of device/config.example.json a user is meant to replace
PLACEHOLDERS = {
    ("secret",): "change-me",
    ("wifi", "ssid"): "my-network",
    ("wifi", "password"): "my-password",
}
TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def where(path: tuple[Any, ...]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(the config)"


def validate(v: Any, s: dict[str, Any], path: tuple[Any, ...], errors: list[str]) -> None:
    """The subset of JSON Schema (2020-12) device/config.schema.json uses."""
    types = s.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        if not any(TYPES[t](v) for t in types):
            errors.append(f"{where(path)}: {json.dumps(v)} is not {' or '.join(types)}")
            return
    if "enum" in s and v not in s["enum"]:
        one = ", ".join(json.dumps(e) for e in s["enum"])
        errors.append(f"{where(path)}: {json.dumps(v)} is not one of {one}")
    if TYPES["number"](v):
        if "minimum" in s and v < s["minimum"]:
            errors.append(f"{where(path)}: {v} is below {s['minimum']}")
        if "exclusiveMinimum" in s and v <= s["exclusiveMinimum"]:
            errors.append(f"{where(path)}: {v} must be above {s['exclusiveMinimum']}")
        if "maximum" in s and v > s["maximum"]:
            errors.append(f"{where(path)}: {v} is above {s['maximum']}")
    if isinstance(v, str):
        if len(v) < s.get("minLength", 0):
            errors.append(f"{where(path)}: must not be empty")
        if "maxLength" in s and len(v) > s["maxLength"]:
            errors.append(f"{where(path)}: longer than {s['maxLength']} characters")
        if "pattern" in s and not re.search(s["pattern"], v):
            errors.append(f"{where(path)}: {v!r} does not match {s['pattern']}")
    if isinstance(v, list):
        if len(v) < s.get("minItems", 0):
            errors.append(f"{where(path)}: needs at least {s['minItems']} entries")
        if "maxItems" in s and len(v) > s["maxItems"]:
            errors.append(f"{where(path)}: at most {s['maxItems']} entries")
        for i, item in enumerate(v):
            validate(item, s.get("items", {}), (*path, i), errors)
    if isinstance(v, dict):
        props = s.get("properties", {})
        for k in s.get("required", ()):
            if k not in v:
                errors.append(f"{where(path)}: {k} is required")
        for k, item in v.items():
            if k in props:
                validate(item, props[k], (*path, k), errors)
            elif s.get("additionalProperties") is False:
                near = [p for p in props if p.replace("_", "")[:5] == k.replace("_", "")[:5]]
                hint = f" (did you mean {near[0]}?)" if near else ""
                errors.append(f"{where((*path, k))}: not a setting the device reads{hint}")


def topic_namespace(path: Path) -> tuple[str, list[str]]:
    """(targetNamespace, root topic names) of a wstop:TopicNamespace document."""
    root = ET.parse(path).getroot()
    if root.tag != f"{{{WSTOP}}}TopicNamespace":
        raise ValueError(f"{path}: not a wstop:TopicNamespace document")
    return root.get("targetNamespace") or "", [
        t.get("name") or "" for t in root.findall(f"{{{WSTOP}}}Topic")
    ]


def check(
    conf: Any, schema: dict[str, Any], topics: tuple[str, list[str]]
) -> tuple[list[str], list[str], list[str]]:
    """-> (errors, warnings, optional packages the config needs)"""
    errors: list[str] = []
    warnings: list[str] = []
    validate(conf, schema, (), errors)
    if not isinstance(conf, dict):
        return errors, warnings, []
    packages = set()
    tns, names = topics
    sensors = conf.get("sensors")
    for i, sp in enumerate(sensors if isinstance(sensors, list) else ()):
        if not isinstance(sp, dict):
            continue
        t = sp.get("topic")
        if isinstance(t, str) and t not in names:
            errors.append(
                f"sensors[{i}].topic: {t!r} is not a topic of {tns} ({' '.join(names)}): "
                "add it to the topics file, or name one of those"
            )
        kind = sp.get("kind", "sim")
        if kind in ("adc", "internal_temp"):
            packages.add("wsn/sensors")
        if kind == "adc" and "pin" not in sp:
            errors.append(f"sensors[{i}]: an adc sensor needs its pin")
    if conf.get("mode") == "sleepy":
        packages.add("wsn/sleepy")
        if not conf.get("gateway"):
            errors.append("mode: sleepy mode sends its readings to a gateway: set gateway")
    wifi = conf.get("wifi")
    if isinstance(wifi, dict) and wifi.get("ssid"):
        packages.add("wsn/wifi")
    if conf.get("gateway_soap") == "1.1":
        packages.add("wsn/core/compat")
    secret = conf.get("secret")
    if isinstance(secret, str) and secret:
        packages.add("wsn/admin")
        if len(secret) < 12 and secret != PLACEHOLDERS[("secret",)]:
            warnings.append("secret: shorter than 12 characters: easy to guess")
    for keys, value in PLACEHOLDERS.items():
        v: Any = conf
        for k in keys:
            v = v.get(k) if isinstance(v, dict) else None
        if v == value:
            warnings.append(f"{'.'.join(keys)}: still the example's {value!r}: set your own")
    return errors, warnings, sorted(packages)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("--topics", type=Path, default=ROOT / "device" / "topics.xml")
    ap.add_argument("--schema", type=Path, default=ROOT / "device" / "config.schema.json")
    a = ap.parse_args(argv)
    try:
        schema = json.loads(a.schema.read_text())
        topics = topic_namespace(a.topics)
    except (OSError, ValueError, ET.ParseError) as e:
        print(f"{e}", file=sys.stderr)
        return 3
    try:
        conf = json.loads(a.config.read_text())
    except (OSError, ValueError) as e:
        print(f"{a.config}: not valid JSON: {e}", file=sys.stderr)
        return 2
    errors, warnings, packages = check(conf, schema, topics)
    for w in warnings:
        print(f"{a.config.name}: warning: {w}", file=sys.stderr)
    for e in errors:
        print(f"{a.config.name}: {e}", file=sys.stderr)
    if errors:
        return 2
    for p in packages:
        print(f"package {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
