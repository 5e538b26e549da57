# Optional package: sleepy mode (config "mode": "sleepy"), for battery sensors. Each cycle the
# device wakes, samples every sensor once, sends the readings gathered since the last accepted
# send in batched Notifys (wsn.gateway, wsn.publisher), and sleeps sample_period_s:
# machine.deepsleep or lightsleep on a board ("sleep": "deep" | "light"), time.sleep on the unix port. It registers
# with Demand=false (WS-BrokeredNotification: the publisher just publishes, the broker does all
# subscription work), serves no Subscribe and opens no HTTP server. What must survive deep
# sleep is a small JSON file (state_file): registration and consumer addresses with their
# reference parameters, termination time, the readings not yet accepted, the wake counter,
# drops, the batch not answered yet (Link._batch). It is written to FILE.tmp and renamed over
# FILE (atomic on LittleFS, the ESP32/Pico W default): a power cut mid-write leaves the previous
# state, so it loses at most the readings of that wake.
import gc
import json
import os
import time

from wsn.device import ms_since, now


def _save(link):
    link._batch()  # saved before it is sent
    p = link.p
    ob = p.outbox
    pend = []
    for _ in range(len(ob)):  # a full turn of the ring: same order afterwards
        it = ob.pop()
        pend.append(it[1:])
        ob.push(it)
    tmp = link.path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"reg": link.reg, "reg_rp": link.reg_rp, "con": p.gateway,
                   "con_rp": p.gateway_rp, "expires": link.expires, "seq": link.seq,
                   "pending": pend, "dropped": ob.dropped, "mid": link.mid}, f)
    if hasattr(os, "sync"):
        os.sync()
    os.rename(tmp, link.path)


async def run(link):
    dev = link.dev
    c = dev.conf.get
    period = float(c("sample_period_s", 10))
    link.path = c("state_file", "wsn_state.json")
    p = link.p
    ob = p.outbox
    # the file, or its .tmp if a rename over it was cut short (FAT renames in two steps)
    for fn in (link.path, link.path + ".tmp"):
        try:
            with open(fn) as f:
                d = json.load(f)
            link.reg, link.reg_rp, link.expires, link.seq, con, con_rp, pend, dropped = (
                d["reg"], d["reg_rp"], d["expires"], d["seq"], d["con"], d["con_rp"],
                d["pending"], d["dropped"])
        except (OSError, ValueError, KeyError, TypeError):  # none, or not ours: start afresh
            continue
        from wsn.core.registration import set_gateway

        set_gateway(p, con, con_rp)
        for ti, payload, t in pend:
            ob.push((None, ti, payload, t))
        ob.dropped += dropped  # plus what a smaller buffer dropped above: the batch shrinks
        link.mid = d.get("mid")  # (absent in the file of an older version: a new batch)
        break
    print("sleepy %s gateway %s period %s s" % (p.device_id, link.url, period))
    how = c("sleep", "deep")
    try:
        import machine
        f = how in ("deep", "light") and getattr(machine, how + "sleep")
    except (ImportError, AttributeError):  # the unix port's machine has no sleeps
        f = None
    while True:
        t0 = time.ticks_ms()
        link.requests = sent = 0
        t = now()
        link.seq += 1
        for s in dev.sensors:
            if s[1] == "heartbeat":
                s[3] = link.seq - 1  # the heartbeat counts wakes across deep sleeps
            payload = dev.read(s)
            if payload:
                # a reading for the gateway without a subscription (Demand=false)
                if p.current:
                    p.current[s[0]] = payload
                p.published += 1
                ob.push((None, s[0], payload, t))
        _save(link)
        from wsn import publisher

        try:
            # renew when the registration would lapse before the wake after next
            if link.reg is not None and link.expires - t < 2 * period + 5:
                await publisher.renew(link)
            while len(ob):
                if link.reg is None or link.expires <= t:
                    # (again after a ResourceUnknownFault: expired, gateway reset)
                    err = await publisher.register(link, False)
                    if err:
                        raise ValueError(err)
                    _save(link)
                n = await link.send()
                if n >= 0:
                    sent += n
                    _save(link)
        except Exception as e:  # noqa: BLE001 - unreachable or refused: keep them, next wake
            dev.log("gateway: %r" % e)
        print("cycle %d awake_ms=%d readings=%d sent=%d pending=%d dropped=%d requests=%d "
              "mem=%d" % (link.seq, ms_since(t0), len(dev.sensors), sent, len(ob),
                          ob.dropped, link.requests, gc.mem_alloc()))
        publisher = None
        dev.idle()  # lightsleep and the unix port keep the heap: start each wake clean
        gc.collect()
        if f:
            f(int(period * 1000))  # deepsleep is a reset: main.py runs again, loads the file
        else:
            time.sleep(period)
