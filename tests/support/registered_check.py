"""Checks that CMake registered every Python test unittest finds.

Usage: registered_check.py DIR MODULE.Class.test_x,...  (the registered list)
Loads every *_test.py in DIR with unittest's own loader and exits 1 naming
each test that is not in the list, or listed and not found
(petra_add_python_suites in tests/CMakeLists.txt registers them).
"""

import os
import sys
import unittest


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: registered_check.py DIR [MODULE.Class.test_x,...]")
    here = os.path.abspath(sys.argv[1])
    sys.path.insert(0, here)
    registered = set(filter(None, (sys.argv[2] if len(sys.argv) > 2
                                   else "").split(",")))
    found = set()
    suites = unittest.defaultTestLoader.discover(here, pattern="*_test.py",
                                                 top_level_dir=here)

    def walk(suite):
        for t in suite:
            if isinstance(t, unittest.TestSuite):
                walk(t)
            elif isinstance(t, unittest.loader._FailedTest):
                sys.exit("registered_check.py: %s does not load: %s"
                         % (t.id(), t._exception))
            else:
                found.add(t.id())
    walk(suites)
    missing = sorted(found - registered)
    stale = sorted(registered - found)
    for t in missing:
        print("not registered with CTest (it would never run): " + t)
    for t in stale:
        print("registered but not a test unittest finds: " + t)
    if missing or stale or not found:
        sys.exit(1)
    print("%d tests in %s, all registered" % (len(found), here))


if __name__ == "__main__":
    main()
