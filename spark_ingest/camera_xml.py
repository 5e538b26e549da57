"""The ONVIF `tt:Message` of a camera's event, as the gateway lands it (issue 25): the
payload of a landing line whose `message_type` is `{http://www.onvif.org/ver10/schema}Message`.

Its shape is the ONVIF schema's (onvif.xsd, element `Message`): attributes `UtcTime`
(required) and `PropertyOperation` (`Initialized`, `Changed`, `Deleted`), and three item
lists, `Source`, `Key` and `Data`, of `SimpleItem Name=".." Value=".."`. The line's
`fields` cannot describe it (leaf attributes by local name, first one wins: every
SimpleItem is `Name`/`Value`), so the payload is parsed, with Spark's built-in `from_xml`:
PERMISSIVE, so a payload that is not XML (or carries a DOCTYPE, which it refuses) gives a
corrupt-record marker instead of failing the job, as `xpath` would. The gateway checked the
root element's namespace (`message_type`); below it, names are matched by local name.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

TT = "http://www.onvif.org/ver10/schema"
MESSAGE_TYPE = "{" + TT + "}Message"
TOPICS_NS = "http://www.onvif.org/ver10/topics"

_ITEM = T.StructType(
    [T.StructField("_Name", T.StringType()), T.StructField("_Value", T.StringType())]
)
_LIST = T.StructType([T.StructField("SimpleItem", T.ArrayType(_ITEM))])
SCHEMA = T.StructType(
    [
        T.StructField("_UtcTime", T.StringType()),
        T.StructField("_PropertyOperation", T.StringType()),
        T.StructField("Source", _LIST),
        T.StructField("Key", _LIST),
        T.StructField("Data", _LIST),
        T.StructField("_corrupt_record", T.StringType()),
    ]
)
_OPTIONS = {
    "mode": "PERMISSIVE",
    "ignoreNamespace": "true",
    "columnNameOfCorruptRecord": "_corrupt_record",
}


def parse(payload: Column) -> Column:
    """The payload as a SCHEMA struct (null for a null payload)."""
    return F.from_xml(payload, SCHEMA, _OPTIONS)


def readable(payload: Column) -> Column:
    """True when the payload is an XML element with a UtcTime (not necessarily valid ONVIF
    in every other respect: items it lacks are simply absent)."""
    m = parse(payload)
    return F.coalesce(
        m.isNotNull() & m["_corrupt_record"].isNull() & m["_UtcTime"].isNotNull(), F.lit(False)
    )


def items(lst: Column) -> Column:
    """`Name=Value` pairs of an item list, in document order, joined with `;` ("" when the
    list is absent): the Source of an event names what it is about (a video source, a rule)."""
    pairs = F.transform(
        F.coalesce(lst["SimpleItem"], F.array().cast(T.ArrayType(_ITEM))),
        lambda i: F.concat_ws("=", i["_Name"], i["_Value"]),
    )
    return F.array_join(pairs, ";")
