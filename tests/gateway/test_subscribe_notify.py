from gwtest import *


async def test_subscribe_notify(gw, consumer):
    r = await call(gw.url, subscribe_body(consumer.url, topic_filter("tns:a")))
    assert r.status == 200, r.text
    validate(r.body)
    r2 = await call(gw.url, notify_body(("tns:a", reading(1)), ("tns:b", reading(2))))
    assert r2.status == 202, r2.text
    await consumer.wait_for(1)
    m = consumer.messages()
    assert len(m) == 1
    validate(consumer.bodies()[0])
