"""Which cameras to subscribe to: one `--onvif-camera ID=URL` option per camera, or a JSON
file for many (docs/gateway.md "Cameras"). Every mistake is a ValueError whose text names
the camera and the field, for the operator.

File format::

    {"cameras": [
      {"id": "front-door", "address": "http://192.168.1.20",
       "user": "admin", "password_file": "/etc/wsn/front-door.pw",
       "mode": "auto", "lifetime": 60}
    ]}

`address` is the camera's base URL (the device service is ``/onvif/device_service`` under
it, as ONVIF fixes); credentials come from `user` and `password` or `password_file`, or
from the URL's user info (``http://admin:secret@192.168.1.20``, percent-encoded).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

#: a camera id is a topic name under the device hierarchy (dev:<id>/..., docs/design.md),
#: so an NCName; also a path segment of its Notify endpoint
_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}\Z")
MODES = ("auto", "pullpoint", "notify")


@dataclass(frozen=True)
class CameraConfig:
    id: str
    address: str  # scheme://host[:port], no user info
    user: str | None = None
    password: str | None = None
    #: auto: a pull point when the camera has them, else Notify to the gateway
    mode: str = "auto"
    #: subscription lifetime asked for, seconds (renewed at half of what is granted); a
    #: short one bounds how long a slot outlives a gateway that died without Unsubscribe
    lifetime: float = 60.0
    #: longest PullMessages wait, seconds (ONVIF: a camera supports at least 60)
    pull_wait: float = 20.0
    #: most messages per PullMessages
    message_limit: int = 100

    @property
    def host(self) -> str:
        """The host of `address`: the client address its events are accounted to (the
        topic quota, gateway.quotas), as a Notify from it would be."""
        return urlsplit(self.address).hostname or ""

    def __repr__(self) -> str:  # never the password
        return (
            f"CameraConfig(id={self.id!r}, address={self.address!r}, user={self.user!r}, "
            f"mode={self.mode!r}, lifetime={self.lifetime!r})"
        )

    def checked(self) -> CameraConfig:
        """Self, or ValueError naming what is wrong."""
        where = f"camera {self.id!r}"
        if not _ID.match(self.id):
            raise ValueError(
                f"{where}: an id is 1-64 characters of letters, digits, '_', '.', '-', "
                "starting with a letter or '_' (it names the camera's topics)"
            )
        u = urlsplit(self.address)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"{where}: address {self.address!r} is not an http(s) URL")
        if self.mode not in MODES:
            raise ValueError(f"{where}: mode {self.mode!r} is not one of {', '.join(MODES)}")
        if not 10 <= self.lifetime <= 86_400:
            raise ValueError(f"{where}: lifetime {self.lifetime} s is outside 10..86400")
        if not 1 <= self.pull_wait <= 60:
            raise ValueError(f"{where}: pull_wait {self.pull_wait} s is outside 1..60")
        if not 1 <= self.message_limit <= 1000:
            raise ValueError(f"{where}: message_limit {self.message_limit} is outside 1..1000")
        return self


def _split_credentials(address: str) -> tuple[str, str | None, str | None]:
    u = urlsplit(address.strip())
    user = unquote(u.username) if u.username else None
    password = unquote(u.password) if u.password is not None else None
    host = u.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{u.port}" if u.port else "")
    return urlunsplit((u.scheme, netloc, u.path.rstrip("/"), "", "")), user, password


def parse_option(text: str) -> CameraConfig:
    """`ID=URL` (``front=http://admin:secret@192.168.1.20``) -> a checked CameraConfig."""
    cam_id, sep, url = text.partition("=")
    if not sep or not cam_id.strip() or not url.strip():
        raise ValueError(f"--onvif-camera {text!r}: expected ID=URL, e.g. front=http://10.0.0.5")
    address, user, password = _split_credentials(url)
    return CameraConfig(cam_id.strip(), address, user, password).checked()


def _entry(raw: Any, n: int, base: Path) -> CameraConfig:
    if not isinstance(raw, dict):
        raise ValueError(f"cameras[{n}] is not an object")
    known = {"id", "address", "user", "password", "password_file", "mode", "lifetime",
             "pull_wait", "message_limit"}  # fmt: skip
    unknown = sorted(set(raw) - known)
    cam_id = raw.get("id")
    where = f"camera {cam_id!r}" if isinstance(cam_id, str) else f"cameras[{n}]"
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}")
    if not isinstance(cam_id, str) or not isinstance(raw.get("address"), str):
        raise ValueError(f"{where}: 'id' and 'address' (strings) are required")
    address, user, password = _split_credentials(raw["address"])
    if "password" in raw and "password_file" in raw:
        raise ValueError(f"{where}: give 'password' or 'password_file', not both")
    if "password_file" in raw:
        pw_path = base / str(raw["password_file"])
        try:
            password = pw_path.read_text().rstrip("\r\n")
        except OSError as e:
            raise ValueError(f"{where}: password_file {pw_path}: {e.strerror}") from None
    elif "password" in raw:
        password = str(raw["password"])
    if "user" in raw:
        user = str(raw["user"])
    cfg = CameraConfig(cam_id, address, user, password)
    for key, kind in (("mode", str), ("lifetime", float), ("pull_wait", float),
                      ("message_limit", int)):  # fmt: skip
        if key in raw:
            v = raw[key]
            if kind is float and isinstance(v, int | float) and not isinstance(v, bool):
                v = float(v)
            if not isinstance(v, kind) or isinstance(v, bool):
                raise ValueError(f"{where}: {key} must be a {kind.__name__}")
            cfg = replace(cfg, **{key: v})  # type: ignore[arg-type]
    return cfg.checked()


def load_file(path: Path) -> list[CameraConfig]:
    """The cameras of a JSON config file (see the module docstring); relative
    password_file paths are read next to it."""
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON: {e}") from None
    cams = data.get("cameras") if isinstance(data, dict) else None
    if not isinstance(cams, list):
        raise ValueError(f'{path}: expected {{"cameras": [...]}}')
    out = [_entry(raw, n, path.parent) for n, raw in enumerate(cams)]
    return unique(out)


def unique(cams: list[CameraConfig]) -> list[CameraConfig]:
    """`cams`, or ValueError if two share an id."""
    seen: set[str] = set()
    for c in cams:
        if c.id in seen:
            raise ValueError(f"camera id {c.id!r} is given twice")
        seen.add(c.id)
    return cams
