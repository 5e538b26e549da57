"""The gateway's structure (docs/design.md "Layers"), read from its source with `ast`, so it
cannot drift: the layering `app -> http -> dispatch -> roles -> state/store/delivery ->
model -> wire/topics`, no import circle (imports under TYPE_CHECKING count: they hide a
loop from the interpreter, not from a reader), no private member of a class used from
another module, and the duties the state has once: demand recomputed in one place, every
lifecycle event logged in one place."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"

#: top to bottom; a module may import modules of its own layer (no circle) or below.
#: Subpackages count as one unit each.
LAYERS: list[tuple[str, set[str]]] = [
    ("app", {"app", "cli", "__main__"}),
    ("http", {"http", "status", "status_feeds", "http_limits"}),
    ("dispatch", {"dispatch"}),
    # the roles: request handlers on gateway.context, and what runs beside them
    # (demand-based publishing, restore and sweeps); onvif: producers inside the gateway,
    # publishing through notify.publish
    ("roles", {
        "context", "notify", "producer", "manager", "pullpoints", "registrations", "wsrf",
        "upkeep", "demand", "onvif", "cameras", "attribution", "pullpoint_bytes",
        "notification_message",
    }),
    ("state/store/delivery", {
        "state", "followers", "longpoll", "oplog", "render", "dedupe", "metrics",
        "storage", "storage_accept", "storage_demand", "storage_landing", "storage_rows",
        "storage_schema", "storage_seen",
        "delivery", "delivery_acks", "delivery_endpoints", "delivery_http", "delivery_pacing",
        "delivery_statelog",
        "landing", "landing_files", "landing_parquet", "landing_record",
        "demand_messages", "demand_client",
    }),
    ("model", {
        "lifecycle", "subscriptions", "publishers", "filters", "loops", "consumer_policy",
        "resource", "config", "quotas", "__init__",
    }),
    ("wire/topics", {"wire", "topics"}),
]  # fmt: skip
LAYER = {m: i for i, (_name, mods) in enumerate(LAYERS) for m in mods}


def _units() -> dict[str, list[Path]]:
    """unit -> its files: each top-level module, each subpackage as one unit."""
    out: dict[str, list[Path]] = {}
    for p in sorted(GATEWAY.glob("*.py")):
        out[p.stem] = [p]
    for d in sorted(GATEWAY.iterdir()):
        if d.is_dir() and (d / "__init__.py").exists():
            out[d.name] = sorted(d.rglob("*.py"))
    return out


def _imported(path: Path, unit: str) -> Iterator[tuple[str, int]]:
    """(gateway unit, line) of every import of `path`, TYPE_CHECKING ones included."""
    tree = ast.parse(path.read_text())
    package = path.relative_to(GATEWAY.parent).with_suffix("").parts[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".")
            if node.level:  # relative: resolve against the file's package
                base = list(package[: len(package) - node.level + 1])
                parts = base + [p for p in parts if p]
            if parts[:1] != ["gateway"]:
                continue
            # from gateway import a, b | from gateway.a import x
            names = [a.name for a in node.names] if len(parts) == 1 else [parts[1]]
            for n in names:
                yield n, node.lineno
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "gateway" and len(parts) > 1:
                    yield parts[1], node.lineno


def _graph() -> dict[str, dict[str, int]]:
    units = _units()
    graph: dict[str, dict[str, int]] = {u: {} for u in units}
    for unit, files in units.items():
        for f in files:
            for dep, line in _imported(f, unit):
                if dep != unit and dep in units:
                    graph[unit].setdefault(dep, line)
    return graph


def test_every_module_has_a_layer() -> None:
    missing = sorted(set(_units()) - set(LAYER))
    assert not missing, f"place these in LAYERS (and docs/design.md 'Layers'): {missing}"


def test_no_module_imports_one_above_it() -> None:
    up = [
        f"gateway/{u} ({LAYERS[LAYER[u]][0]}) imports {d} ({LAYERS[LAYER[d]][0]}), line {n}"
        for u, deps in _graph().items()
        for d, n in deps.items()
        if u in LAYER and d in LAYER and LAYER[d] < LAYER[u]
    ]
    assert not up, "\n".join(up)


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one unit (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circle() -> None:
    assert _cycles(_graph()) == []


def test_the_circle_check_finds_a_circle() -> None:
    assert _cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {}}) == [["a", "b", "c"]]


def test_handlers_import_no_broker() -> None:
    roles = LAYERS[LAYER["notify"]][1]
    graph = _graph()
    assert "broker" not in graph
    for r in roles & set(graph):
        assert not {"app", "http", "dispatch", "status"} & set(graph[r]), r


#: private names of other libraries' classes the gateway relies on (documented where used)
THIRD_PARTY_PRIVATE = {
    "_Element",  # lxml's element type, as lxml-stubs names it
    "_upper_bounds", "_buckets", "_sum",  # prometheus-client Histogram (metrics._observe_many)
    "_value_1",  # zeep's attribute for an element's any-content (onvif/client._granted)
}  # fmt: skip


def _defined_private(tree: ast.Module) -> set[str]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(n.name)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            out.add(n.attr)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            out.add(n.target.id)
    return {x for x in out if x.startswith("_")}


def test_no_private_member_is_used_from_another_module() -> None:
    bad = []
    for path in sorted(GATEWAY.rglob("*.py")):
        tree = ast.parse(path.read_text())
        own = _defined_private(tree)
        for n in ast.walk(tree):
            name = None
            if isinstance(n, ast.Attribute) and not (
                isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")
            ):
                name = n.attr
            elif (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name)
                and n.func.id in ("getattr", "setattr", "hasattr")
                and len(n.args) > 1
                and isinstance(n.args[1], ast.Constant)
            ):
                name = str(n.args[1].value)
            if (
                name
                and name.startswith("_")
                and not name.startswith("__")
                and name not in own
                and name not in THIRD_PARTY_PRIVATE
            ):
                bad.append(f"{path.relative_to(GATEWAY.parent)}:{n.lineno} uses {name}")
    assert not bad, "\n".join(bad)


def _calls(name: str) -> list[str]:
    """file:line of every call of a function or method called `name` in gateway/."""
    out = []
    for path in sorted(GATEWAY.rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Call):
                f = n.func
                called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                if called == name:
                    out.append(f"{path.name}:{n.lineno}")
    return out


def test_demand_is_recomputed_in_one_place() -> None:
    assert len(_calls("_demand_changes")) == 1, _calls("_demand_changes")


def test_lifecycle_events_are_logged_in_one_place() -> None:
    """Every lifecycle step's log line comes from gateway.oplog's OperatorLog, by the key in
    gateway.lifecycle's table: no other module names a step's key (no second place that
    logs a subscription's end, say)."""
    from gateway import lifecycle

    keys = {s.event for s in lifecycle.STEPS if s.event}
    assert {"subscription_ended", "subscription_expired", "registration_ended"} <= keys
    named = []
    for path in sorted(GATEWAY.rglob("*.py")):
        if path.name == "lifecycle.py":
            continue
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Constant) and n.value in keys:
                named.append(f"{path.name}:{n.lineno} {n.value}")
    assert not named, named
    calls = [c for c in _calls("event") if c.startswith("oplog.py")]
    assert len(calls) == 3, calls  # OperatorLog: steps and demand; RefusalLog: 401s
