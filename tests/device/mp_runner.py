# ruff: noqa: UP031 - MicroPython-compatible test code (%-formatting runs on every port)
# Runs the device core's unit tests under MicroPython (unix port, 32-bit build, QEMU board).
#
#   micropython tests/device/mp_runner.py        # discovers tests/device/core/test_*.py
#   import mp_runner; mp_runner.run(["test_xml", ...])   # frozen on QEMU: modules by name
#
# Each module's test_* functions run in sorted order; a failure prints its exception; the
# last line is `N passed, N failed`. run() returns the number of failures.
import gc
import sys


def _print_exc(e):
    try:
        sys.print_exception(e)
    except AttributeError:  # CPython, if anyone runs it there
        import traceback

        traceback.print_exception(e)


def run(module_names):
    passed = 0
    failed = 0
    for name in module_names:
        try:
            mod = __import__(name)
        except Exception as e:
            print("FAIL %s (import): %r" % (name, e))
            _print_exc(e)
            failed += 1
            continue
        for fname in sorted([n for n in dir(mod) if n.startswith("test_")]):
            fn = getattr(mod, fname)
            try:
                fn()
                passed += 1
            except Exception as e:
                failed += 1
                print("FAIL %s.%s: %r" % (name, fname, e))
                _print_exc(e)
            gc.collect()
    print("%d passed, %d failed" % (passed, failed))
    return failed


def _main():
    import os

    here = __file__.rpartition("/")[0] if "/" in __file__ else "."
    core = here + "/core"
    root = here + "/../.."
    for p in (core, root + "/device"):
        if p not in sys.path:
            sys.path.insert(0, p)
    names = sorted(
        [f[:-3] for f in os.listdir(core) if f.startswith("test_") and f.endswith(".py")]
    )
    if len(sys.argv) > 1:
        names = [n for n in names if n in sys.argv[1:]]
    sys.exit(1 if run(names) else 0)


if __name__ == "__main__":
    _main()
