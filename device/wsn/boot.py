# Start-up of the device (wsn.device): the config file, the topic namespace, the sensors, Wi-Fi
# and the clock. Imported once at boot and dropped when the device is idle (wsn.device.idle).
# flash.sh checks a config against device/config.schema.json before it is copied to a board;
# what is checked here is what the device needs to start, with an answer a human can act on.
import gc
import json
import os
import sys

from wsn.core.topics import load_namespace, topic_set


def configure(dev, path):
    with open(path) as f:
        conf = json.load(f)
    if not isinstance(conf, dict) or "device_id" not in conf or "http_port" not in conf:
        raise ValueError("config: a JSON object with device_id and http_port")
    dev.conf = conf
    g = conf.get
    dev.device_id = str(conf["device_id"])
    # conf["limits"] itself: the Producer completes it with its defaults (no second dict)
    lim = conf["limits"] = g("limits") or {}
    if "gateway_buffer" in conf:
        lim["gateway_buffer"] = int(conf["gateway_buffer"])
    dev.limits = lim
    # pushes in flight at once (bounds the heap)
    dev.slots = int(lim.get("push_concurrency", 2))
    # Drop the request path when idle (wsn.device.idle): yes for .mpy files and frozen modules,
    # not for .py files, which would be compiled again for every request (slower, and the
    # compiler needs more heap than the bytecode it makes)
    u = lim.get("unload")
    if u is None:
        f = sys.modules["wsn.device"].__file__
        try:
            u = not (f[-3:] == ".py" and os.stat(f))
        except OSError:  # frozen: no file
            u = True
    dev.unload = u
    # Collect after every gc_threshold bytes allocated (not only when the heap is full):
    # garbage between collections is what the peak is made of, and collecting a small heap
    # takes about a millisecond. Default: 2048 on heaps up to 256 KB (boards without
    # PSRAM), off on larger ones (a collection there costs more than the headroom is worth).
    th = lim.get("gc_threshold")
    if th is None:
        th = 2048 if gc.mem_free() + gc.mem_alloc() <= 262144 else 0
    if th and hasattr(gc, "threshold"):
        gc.threshold(int(th))
    # the topic namespace document: topics_file, else next to main.py, /topics.xml,
    # /lib/topics.xml, else the default topics
    tns, names = "urn:wsn-edge:device-topics", "temperature humidity light heartbeat".split()
    d = sys.argv[0].rpartition("/")[0] if sys.argv and sys.argv[0] else "."
    for fn in (g("topics_file"), d + "/topics.xml", "/topics.xml", "/lib/topics.xml"):
        try:
            with open(fn, "rb") as f:
                tns, names = load_namespace(f.read())
            break
        except (OSError, TypeError):
            pass
    ts = dev.topicset = topic_set(tns, names)
    dev.sensors = []
    for sp in g("sensors") or [{"topic": "temperature"}]:
        t = sp.get("topic", "")
        ti = names.index(t) if t in names else -1
        if ti < 0:
            raise ValueError("sensor topic %s not in the topic namespace %s (%s)" % (
                t, tns, " ".join(names)))
        k = sp.get("kind", "sim")
        hw = None
        if k in ("adc", "internal_temp"):
            try:
                from wsn import sensors
            except ImportError:
                raise ValueError("sensor kind %s needs the package wsn/sensors" % k)
            hw = sensors.open(k, sp)
            if hw is None:
                # the unix port and the QEMU board have no `machine` (or one without ADC): a
                # board-only kind is simulated there (and says so), so one config runs anywhere
                print("sensor %s: no %s hardware here, simulating" % (t, k))
        elif k not in ("sim", "heartbeat"):
            raise ValueError("sensor kind %s: one of sim heartbeat internal_temp adc" % k)
        # the default units (UCUM): one string, split here, not eight short constants (a .mpy
        # keeps each short constant as a name for good)
        u = "temperature Cel humidity %RH light lx heartbeat 1".split()
        # its period in ms: period_s, else sample_period_s (0: only on /admin/sample)
        dev.sensors.append([ti, k, sp, 0, hw, sp.get("unit") or (
            u[u.index(t) + 1] if t in u else ""),
            int(float(sp.get("period_s", g("sample_period_s", 10))) * 1000)])
    # "awake" (default): serves Subscribe, pushes each reading; "sleepy": wsn.sleepy
    if g("mode") not in (None, "awake", "sleepy") or g("mode") == "sleepy" and not g("gateway"):
        raise ValueError("config: mode 'awake', or 'sleepy' with a 'gateway'")


def network(dev):
    # -> the base URL of every address the device hands out: advertise_host, else the Wi-Fi
    # address (the package wsn.wifi joins the network named in "wifi"), else http_host, else
    # 127.0.0.1
    g = dev.conf.get
    host = g("http_host", "0.0.0.0")
    adv = None
    w = g("wifi")
    if w and w.get("ssid"):
        try:
            from wsn import wifi
        except ImportError:
            wifi = None
        try:
            import network  # noqa: F401 - a board (the unix port has no Wi-Fi to join)

            if not wifi:
                raise ValueError("config wifi needs the package wsn/wifi (or join in boot.py)")
            adv = wifi.join(w)
        except ImportError:
            pass
        dev.conf.pop("wifi")  # joined: the password need not stay in RAM
    adv = g("advertise_host") or adv or (host if host not in ("0.0.0.0", "") else "127.0.0.1")
    return "http://%s:%d" % (adv, int(g("http_port")))


def start(dev, path):
    # The config file at path (configure()), the network, the producer, the gateway link and
    # the server. -> the coroutine of sleepy mode (wsn.sleepy) to run instead of the server, or
    # None once the server listens (it prints one line `producer http://...`).
    import asyncio
    import os
    import socket

    from wsn.core.ops import new_producer

    configure(dev, path)
    g = dev.conf.get
    base = network(dev)
    p = dev.producer = new_producer(dev.device_id, dev.topicset, base, os.urandom, dev.limits)
    if g("consumer_allow") is not None:
        p.consumer_allow = list(g("consumer_allow"))
    try:
        from wsn.core import current  # noqa: F401 - there or not (dropped when idle)
    except ImportError:
        p.current = None  # no GetCurrentMessage: no last reading kept per topic
    if g("gateway"):
        from wsn import publisher

        dev.link = publisher.setup(dev)
        if g("mode") == "sleepy":
            try:
                from wsn import sleepy
            except ImportError:
                raise ValueError("config: mode sleepy needs the package wsn/sleepy")
            return sleepy.run(dev.link)
    s = socket.socket()
    s.setblocking(False)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(socket.getaddrinfo(g("http_host", "0.0.0.0"), int(g("http_port")))[0][-1])
    s.listen(8)
    asyncio.create_task(dev.serve(s))
    print("producer %s/wsn/producer" % base)
    if dev.link:
        asyncio.create_task(dev.link.run())
