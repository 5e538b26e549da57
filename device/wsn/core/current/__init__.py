# Optional package: GetCurrentMessage (WS-BaseNotification 1.3 §4.3), the last reading of a
# topic. Without it, the request gets wsa:ActionNotSupported (wsn.core.ops).
from wsn.core import soap as S
from wsn.core.request import Fault
from wsn.core.topics import resolve


def get_current(p, req, _, now, actions):
    # A Simple expression names one topic: more than one wsnt:Topic is a fault of its own.
    topics = req.body.findall(S.WSNT, "Topic")
    if len(topics) != 1:
        raise Fault("MultipleTopicsSpecifiedFault", "%d topics: name one" % len(topics)) if topics \
            else Fault("InvalidTopicExpressionFault", "no wsnt:Topic")
    i = resolve(p.topics, topics[0], True)
    if p.current[i] is None:
        raise Fault("NoCurrentMessageOnTopicFault", "no reading on %s yet" % p.topics.names[i])
    return S.wrap("wsnt:GetCurrentMessageResponse", p.current[i])
