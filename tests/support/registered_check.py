"""Checks that CMake registered every deployment test unittest finds.

Usage: registered_check.py MODULE.Class.test_x,...  (the registered list)
Loads every *_test.py beside this file with unittest's own loader and
exits 1 naming each test that is not in the list, or listed and not found.
"""

import os
import sys
import unittest


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    registered = set(filter(None, (sys.argv[1] if len(sys.argv) > 1
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
    print("%d deployment tests, all registered" % len(found))


if __name__ == "__main__":
    main()
