# Sensors. On the unix port they are simulated; on boards they read the internal temperature
# sensor or an ADC pin through `machine` (imported only when asked for, so the unix port and
# the QEMU board never need it).
#
# A sensor spec (config "sensors" list): {"topic": "temperature", "kind": "sim" |
# "internal_temp" | "adc" | "heartbeat", "unit": "Cel", "pin": 26, "scale": 1.0,
# "offset": 0.0, "decimals": 2, "base": 21.0, "amplitude": 2.0}
import math


class Sim:
    # a slow sine around `base`, deterministic (tests can predict the range)
    def __init__(self, spec):
        self.base = spec.get("base", 21.0)
        self.amp = spec.get("amplitude", 2.0)
        self.n = 0

    def read(self):
        self.n += 1
        return self.base + self.amp * math.sin(self.n * 0.1)


class Heartbeat:
    # a counter: proves the device is alive, one reading per period
    def __init__(self, spec):
        self.n = 0

    def read(self):
        self.n += 1
        return self.n


class InternalTemp:
    # RP2040 (Pico W): ADC channel 4, 27 degC at 0.706 V, -1.721 mV/K (RP2040 datasheet
    # §4.9.5). ESP32: esp32.mcu_temperature() (degC) or raw_temperature() (degF).
    def __init__(self, spec):
        self.adc = None
        self.esp = None
        try:
            import esp32
            self.esp = esp32
        except ImportError:
            import machine
            self.adc = machine.ADC(4)

    def read(self):
        if self.adc is not None:
            v = self.adc.read_u16() * 3.3 / 65535
            return 27 - (v - 0.706) / 0.001721
        if hasattr(self.esp, "mcu_temperature"):
            return self.esp.mcu_temperature()
        return (self.esp.raw_temperature() - 32) / 1.8


class Adc:
    # value = read_u16() * scale + offset
    def __init__(self, spec):
        import machine
        self.adc = machine.ADC(machine.Pin(spec["pin"]))
        self.scale = spec.get("scale", 1.0)
        self.offset = spec.get("offset", 0.0)

    def read(self):
        return self.adc.read_u16() * self.scale + self.offset


_KINDS = {"sim": Sim, "heartbeat": Heartbeat, "internal_temp": InternalTemp, "adc": Adc}
# (topic, unit) pairs: a constant tuple, frozen into flash it costs no heap
UNITS = (("temperature", "Cel"), ("humidity", "%RH"), ("light", "lx"), ("heartbeat", "1"))


def unit(topic):
    for t, u in UNITS:
        if t == topic:
            return u
    return ""


def make(spec):
    # -> a sensor object with read(). A board-only kind on a port without `machine` falls
    # back to Sim (and says so), so one config runs on the unix port too. The unix port has a
    # `machine` module without ADC, hence AttributeError as well as ImportError.
    kind = spec.get("kind", "sim")
    cls = _KINDS.get(kind)
    if cls is None:
        raise ValueError("sensor kind %s: one of %s" % (kind, " ".join(_KINDS)))
    try:
        return cls(spec)
    except (ImportError, AttributeError):
        print("sensor %s: no %s hardware here, simulating" % (spec.get("topic"), kind))
        return Sim(spec)
