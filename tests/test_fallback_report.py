"""`hw.profiler.fallback_report()` printed: a sentence when nothing fell back (it printed a bare `[]`), a small table
otherwise; it stays the list of dicts that code and the docs use."""
from __future__ import annotations

import numpy as np

import hwadapter as hw


def test_printed_with_nothing_fallen_back_it_says_so():
    report = hw.profiler.fallback_report()
    assert report == [] and not report and isinstance(report, list)
    assert str(report) == "no op fell back: every op ran on the device of its inputs"


def test_printed_after_a_fallback_it_is_a_table_and_still_a_list(testdev):
    x = hw.to_tensor(np.array([1.0, -2.0], np.float32), device=testdev)
    hw.exp(x)
    hw.exp(x)  # testdev has no exp: it runs on the CPU, twice
    report = hw.profiler.fallback_report()
    assert report == [{"op": "exp", "device": "testdev:0", "dtypes": ("float32",), "ran_on": "cpu:0", "count": 2}]
    lines = str(report).splitlines()
    assert lines[0].startswith("2 fallback(s)")
    assert lines[1].split() == ["op", "device", "dtypes", "ran", "on", "count"]
    assert lines[2].split() == ["exp", "testdev:0", "float32", "cpu:0", "2"]
