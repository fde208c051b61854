#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run the Python helper's unittest suite and report it as TAP (for
tests/run-tests.sh, which sums TAP lines into make check's summary)."""
import os
import sys
import unittest


class TapResult(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.n = 0

    def _line(self, ok, test, extra=""):
        self.n += 1
        print(f"{'ok' if ok else 'not ok'} {self.n} - {test.id()}{extra}")

    def addSuccess(self, test):
        super().addSuccess(test)
        self._line(True, test)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._line(False, test)
        print("# " + self._exc_info_to_string(err, test).replace("\n",
                                                                 "\n# "))

    def addError(self, test, err):
        super().addError(test, err)
        self._line(False, test)
        print("# " + self._exc_info_to_string(err, test).replace("\n",
                                                                 "\n# "))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._line(True, test, f" # SKIP {reason}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    suite = unittest.defaultTestLoader.discover(here)
    print(f"1..{suite.countTestCases()}")
    result = TapResult()
    suite.run(result)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
