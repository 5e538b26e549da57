# Optional package: the board sensors. A config sensor of kind "adc" (value = read_u16() *
# scale + offset) or "internal_temp" (the MCU's temperature) needs it; "sim" and "heartbeat"
# do not (wsn.device). wsn.boot calls open() once per sensor.


def open(kind, sp):
    # -> a function returning the sensor's value (a number), or None where the port has no
    # such hardware (the unix port, QEMU: the device then simulates it)
    try:
        import machine

        if kind == "adc":
            adc = machine.ADC(machine.Pin(sp["pin"]))
            scale = sp.get("scale", 1.0)
            offset = sp.get("offset", 0.0)
            return lambda: adc.read_u16() * scale + offset
        try:
            # ESP32: esp32.mcu_temperature() (degC), or raw_temperature() (degF)
            import esp32

            if hasattr(esp32, "mcu_temperature"):
                return esp32.mcu_temperature
            return lambda: (esp32.raw_temperature() - 32) / 1.8
        except ImportError:
            # RP2040: ADC 4, 27 degC at 0.706 V, -1.721 mV/K (datasheet §4.9.5)
            adc = machine.ADC(4)
            return lambda: 27 - (adc.read_u16() * 3.3 / 65535 - 0.706) / 0.001721
    except (ImportError, AttributeError):
        return None
