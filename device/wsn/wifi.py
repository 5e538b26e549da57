# Wi-Fi join on boards (ESP32, Pico W) through `network`, plus NTP so the dateTimes are real.
# On ports without `network` (unix) it does nothing.
import time


def connect(conf, timeout_s=30):
    # conf: {"ssid": ..., "password": ..., "hostname": optional, "ntp": true}. -> the IP
    # address, or None when there is no `network` module or no ssid configured.
    try:
        import network
    except ImportError:
        return None
    if not conf or not conf.get("ssid"):
        return None
    wlan = network.WLAN(network.STA_IF)
    wlan.active(True)
    if conf.get("hostname"):
        try:
            network.hostname(conf["hostname"])
        except (AttributeError, ValueError):
            pass
    if not wlan.isconnected():
        wlan.connect(conf["ssid"], conf.get("password", ""))
        t0 = time.ticks_ms()
        while not wlan.isconnected():
            if time.ticks_diff(time.ticks_ms(), t0) > timeout_s * 1000:
                raise OSError("Wi-Fi: could not join '%s' in %d s" % (conf["ssid"], timeout_s))
            time.sleep_ms(200)
    ip = wlan.ifconfig()[0]
    if conf.get("ntp", True):
        try:
            import ntptime
            ntptime.settime()
        except Exception as e:  # noqa: BLE001 - no NTP: times are wrong, the device still works
            print("ntp failed:", repr(e))
    return ip
