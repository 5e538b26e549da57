"""WS-Addressing actions derived from the official WSDL portTypes, for tests of both parts.

Tests must not take expected actions from our own constants (`gateway.wire.ns.A_*`, the device's
tables): a wrong constant would be checked against itself. This module reads the WSDL text
with lxml and applies the rule of WS-Addressing 1.0 - Metadata (W3C, 2007) §4.4.4
"Default Action Pattern for WSDL 1.1":

    input/output: [targetNamespace]/[portType name]/[input|output name]
    fault:        [targetNamespace]/[portType name]/[operation name]/Fault/[fault name]

(the delimiter is ":" when the targetNamespace is a URN, and none is added when it already
ends with "/"). When an input or output has no `name`, WSDL 1.1 §2.4.5 gives it one: the
operation name plus "Request"/"Response" for request-response, the operation name alone for
a one-way operation. An explicit `wsam:Action`, `wsaw:Action` or (OASIS WSRF style)
`wsa:Action` attribute wins over the default.

Sources, in this order:

- `bw-2.wsdl` shipped by the PyPI package `onvif-zeep-async` under `onvif/wsdl/` (the OASIS
  WS-BaseNotification 1.3 file): NotificationConsumer, NotificationProducer, PullPoint,
  CreatePullPoint, SubscriptionManager, PausableSubscriptionManager.
- That package's `rw-2.wsdl` holds only WSRF fault messages, and it ships no rpw-2, rlw-2 or
  brw-2 WSDL. For those the portType fragments below (`WSRF_FRAGMENTS`, `BRW_FRAGMENT`) are
  transcribed, names only, from: the OASIS WSRF 1.2 `rpw-2.wsdl` (portType
  GetResourceProperty) and `rlw-2.wsdl` (ImmediateResourceTermination,
  ScheduledResourceTermination), whose operations the WS-BrokeredNotification text
  (/work/shared/specs/002_*.txt, PublisherRegistrationManager portType: "extends
  wsrp:ResourceProperties", "extends wsrl:ImmediateResourceTermination", "extends
  wsrl:ScheduledResourceTermination") reuses with the input names GetResourcePropertyRequest,
  DestroyRequest, SetTerminationTimeRequest; and the WS-BrokeredNotification 1.3 `brw-2`
  names given in /work/shared/specs/README.md (portTypes RegisterPublisher and
  PublisherRegistrationManager, operations RegisterPublisher and DestroyRegistration; the
  2004 text §5.4 has the same RegisterPublisher operation). The same derivation code runs
  over them, so only the names are transcribed, never an action URI.

What a caller may rely on:

- `official_actions()` maps (portType local name, operation name) to `OperationActions`
  for every portType above; it is cached and never mutated.
- `action(port_type, operation, "input"|"output")` returns one action or raises KeyError.
- `wsdl_actions(source)` does the same derivation for any WSDL 1.1 file or text (device
  tests may point it at another file).
- `WSDL_DIR` is the directory of the official files (also b-2.xsd, bf-2.xsd, r-2.xsd,
  t-1.xsd, ws-addr.xsd for schema validation).
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from lxml import etree

WSDL_NS = "http://schemas.xmlsoap.org/wsdl/"
#: attributes that carry an explicit action on wsdl:input/output/fault
EXPLICIT_ACTION_ATTRS = (
    "{http://www.w3.org/2007/05/addressing/metadata}Action",  # wsam (WS-Addr Metadata)
    "{http://www.w3.org/2006/05/addressing/wsdl}Action",  # wsaw (WS-Addr WSDL binding CR)
    "{http://www.w3.org/2005/08/addressing}Action",  # wsa, as the OASIS WSRF WSDLs write it
)


def _wsdl_dir() -> Path:
    # found without importing onvif: its client module calls logging.basicConfig(INFO)
    spec = importlib.util.find_spec("onvif")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("onvif-zeep-async is not installed (it ships the OASIS WSDL)")
    return Path(next(iter(spec.submodule_search_locations))) / "wsdl"


WSDL_DIR: Path = _wsdl_dir()

# Names only (see the module docstring for their source); the actions are derived.
WSRF_FRAGMENTS = """\
<wsdl:definitions xmlns:wsdl="http://schemas.xmlsoap.org/wsdl/"
    targetNamespace="http://docs.oasis-open.org/wsrf/rpw-2">
  <wsdl:portType name="GetResourceProperty">
    <wsdl:operation name="GetResourceProperty">
      <wsdl:input name="GetResourcePropertyRequest" message="x"/>
      <wsdl:output name="GetResourcePropertyResponse" message="x"/>
      <wsdl:fault name="ResourceUnknownFault" message="x"/>
      <wsdl:fault name="ResourceUnavailableFault" message="x"/>
      <wsdl:fault name="InvalidResourcePropertyQNameFault" message="x"/>
    </wsdl:operation>
  </wsdl:portType>
</wsdl:definitions>
---
<wsdl:definitions xmlns:wsdl="http://schemas.xmlsoap.org/wsdl/"
    targetNamespace="http://docs.oasis-open.org/wsrf/rlw-2">
  <wsdl:portType name="ImmediateResourceTermination">
    <wsdl:operation name="Destroy">
      <wsdl:input name="DestroyRequest" message="x"/>
      <wsdl:output name="DestroyResponse" message="x"/>
      <wsdl:fault name="ResourceNotDestroyedFault" message="x"/>
      <wsdl:fault name="ResourceUnknownFault" message="x"/>
      <wsdl:fault name="ResourceUnavailableFault" message="x"/>
    </wsdl:operation>
  </wsdl:portType>
  <wsdl:portType name="ScheduledResourceTermination">
    <wsdl:operation name="SetTerminationTime">
      <wsdl:input name="SetTerminationTimeRequest" message="x"/>
      <wsdl:output name="SetTerminationTimeResponse" message="x"/>
      <wsdl:fault name="UnableToSetTerminationTimeFault" message="x"/>
      <wsdl:fault name="ResourceUnknownFault" message="x"/>
      <wsdl:fault name="ResourceUnavailableFault" message="x"/>
      <wsdl:fault name="TerminationTimeChangeRejectedFault" message="x"/>
    </wsdl:operation>
  </wsdl:portType>
</wsdl:definitions>
"""

BRW_FRAGMENT = """\
<wsdl:definitions xmlns:wsdl="http://schemas.xmlsoap.org/wsdl/"
    targetNamespace="http://docs.oasis-open.org/wsn/brw-2">
  <wsdl:portType name="RegisterPublisher">
    <wsdl:operation name="RegisterPublisher">
      <wsdl:input message="x"/>
      <wsdl:output message="x"/>
      <wsdl:fault name="ResourceUnknownFault" message="x"/>
      <wsdl:fault name="InvalidTopicExpressionFault" message="x"/>
      <wsdl:fault name="TopicNotSupportedFault" message="x"/>
      <wsdl:fault name="PublisherRegistrationRejectedFault" message="x"/>
      <wsdl:fault name="PublisherRegistrationFailedFault" message="x"/>
      <wsdl:fault name="UnacceptableInitialTerminationTimeFault" message="x"/>
    </wsdl:operation>
  </wsdl:portType>
  <wsdl:portType name="PublisherRegistrationManager">
    <wsdl:operation name="DestroyRegistration">
      <wsdl:input message="x"/>
      <wsdl:output message="x"/>
      <wsdl:fault name="ResourceUnknownFault" message="x"/>
      <wsdl:fault name="ResourceNotDestroyedFault" message="x"/>
    </wsdl:operation>
  </wsdl:portType>
</wsdl:definitions>
"""


@dataclass(frozen=True)
class OperationActions:
    """The actions of one WSDL operation; `output` is None for a one-way operation."""

    namespace: str
    port_type: str
    operation: str
    input: str
    output: str | None
    #: fault name -> default (or explicit) fault action
    faults: dict[str, str] = field(default_factory=dict)


def _join(namespace: str, *parts: str) -> str:
    # WS-Addressing 1.0 Metadata §4.4.4: ":" for a URN, "/" otherwise, none if already there
    delim = ":" if namespace.lower().startswith("urn:") else "/"
    base = namespace if namespace.endswith(delim) else namespace + delim
    return base + delim.join(parts)


def _explicit(el: etree._Element) -> str | None:
    for attr in EXPLICIT_ACTION_ATTRS:
        v = el.get(attr)
        if v:
            return v.strip()
    return None


def _parse(source: str | Path | bytes) -> etree._Element:
    # no DTDs, no network: the WSDL is data, not a program
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)
    if isinstance(source, Path):
        return etree.parse(str(source), parser).getroot()
    data = source.encode() if isinstance(source, str) else source
    return etree.fromstring(data, parser)


def wsdl_actions(source: str | Path | bytes) -> dict[tuple[str, str], OperationActions]:
    """Derive the actions of every operation of every portType in one WSDL 1.1 document
    (a Path is read from disk; str/bytes is the WSDL text itself)."""
    root = _parse(source)
    tns = root.get("targetNamespace") or ""
    out: dict[tuple[str, str], OperationActions] = {}
    for pt in root.iterfind(f"{{{WSDL_NS}}}portType"):
        pt_name = pt.get("name") or ""
        for op in pt.iterfind(f"{{{WSDL_NS}}}operation"):
            op_name = op.get("name") or ""
            inp = op.find(f"{{{WSDL_NS}}}input")
            outp = op.find(f"{{{WSDL_NS}}}output")
            if inp is None:
                continue  # notification/solicit-response: nothing a server answers
            one_way = outp is None
            # WSDL 1.1 §2.4.5 default names
            in_name = inp.get("name") or (op_name if one_way else op_name + "Request")
            in_action = _explicit(inp) or _join(tns, pt_name, in_name)
            out_action = None
            if outp is not None:
                out_name = outp.get("name") or op_name + "Response"
                out_action = _explicit(outp) or _join(tns, pt_name, out_name)
            faults = {
                f.get("name") or "": _explicit(f)
                or _join(tns, pt_name, op_name, "Fault", f.get("name") or "")
                for f in op.iterfind(f"{{{WSDL_NS}}}fault")
            }
            out[(pt_name, op_name)] = OperationActions(
                tns, pt_name, op_name, in_action, out_action, faults
            )
    return out


@functools.cache
def official_actions() -> dict[tuple[str, str], OperationActions]:
    """Every (portType, operation) of bw-2.wsdl plus the WSRF and brw-2 fragments."""
    table = dict(wsdl_actions(WSDL_DIR / "bw-2.wsdl"))
    for doc in [*WSRF_FRAGMENTS.split("---\n"), BRW_FRAGMENT]:
        table.update(wsdl_actions(doc))
    return table


def action(port_type: str, operation: str, direction: str = "input") -> str:
    """The action of `operation` in `port_type`: direction "input" (request) or "output"
    (response). KeyError if the WSDL has no such operation or it is one-way."""
    ops = official_actions()[(port_type, operation)]
    if direction == "input":
        return ops.input
    if direction == "output" and ops.output is not None:
        return ops.output
    raise KeyError(f"{port_type}/{operation} has no {direction}")


if __name__ == "__main__":  # print the table: python -m tests.wsdl_actions
    for (pt, op), a in sorted(official_actions().items()):
        print(f"{pt}/{op}\n  in:  {a.input}\n  out: {a.output}")
