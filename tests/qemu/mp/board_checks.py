# Board self-checks, frozen into the QEMU firmware and also run on the 32-bit unix port.
# They pin down the properties of a small 32-bit MicroPython that the device code must live
# with (ESP32 / RP2040 have the same ones), so a build that silently changed them (double floats,
# 64-bit small ints, a missing module) is noticed before the device's own tests are blamed.
# Plain `test_*` functions; run() prints a final "N passed, N failed" line like mp_runner.
import sys


def test_implementation():
    assert sys.implementation.name == "micropython"
    assert sys.implementation.version[0] == 1


def test_single_precision_float():
    # float32 has a 24-bit mantissa: 1 + 2**-30 rounds back to 1 (it would not in a double).
    assert 1.0 + 2.0**-30 == 1.0
    assert 1.0 + 2.0**-20 != 1.0


def test_small_ints_are_31_bit():
    # sys.maxsize is 2**31 - 1 on a 32-bit port; bigger values become (slow) long ints.
    assert sys.maxsize == 2**31 - 1
    big = (1 << 40) + 1
    assert big - (1 << 40) == 1
    assert (2**31) * 2 == 2**32


def test_builtin_modules_the_core_needs():
    import binascii
    import gc
    import json
    import re

    assert json.loads(json.dumps({"a": [1, "x"]})) == {"a": [1, "x"]}
    assert re.match("a+", "aaab").group(0) == "aaa"
    assert binascii.hexlify(b"\x01") == b"01"
    gc.collect()
    assert gc.mem_free() > 0


def run():
    mod = sys.modules[__name__]
    passed = failed = 0
    for name in sorted(dir(mod)):
        if not name.startswith("test_"):
            continue
        try:
            getattr(mod, name)()
            passed += 1
            print("PASS", name)
        except Exception as e:  # report every failure, keep going
            failed += 1
            print("FAIL", name, type(e).__name__, e)
    print(f"{passed} passed, {failed} failed")
    return failed
