# Optional package: join Wi-Fi from the config ("wifi": {"ssid", "password", "hostname",
# "ntp": true}) and set the clock by NTP, so the dateTimes are real (ESP32, Pico W). wsn.boot
# calls join() once at start; without the package, join the network in your boot.py.
import time


def join(w):
    # -> the board's IP address; OSError when the network is not joined within 30 s
    import network

    wlan = network.WLAN(network.STA_IF)
    wlan.active(True)
    try:
        network.hostname(w["hostname"])
    except (KeyError, AttributeError, ValueError):
        pass
    if not wlan.isconnected():
        wlan.connect(w["ssid"], w.get("password", ""))
        t0 = time.ticks_ms()
        while not wlan.isconnected():
            if time.ticks_diff(time.ticks_ms(), t0) > 30000:
                raise OSError("Wi-Fi: could not join %s in 30 s" % w["ssid"])
            time.sleep_ms(200)
    if w.get("ntp", True):
        try:
            import ntptime

            ntptime.settime()
        except Exception as e:  # noqa: BLE001 - no NTP: times are wrong, the device works
            print("ntp failed:", repr(e))
    return wlan.ifconfig()[0]
