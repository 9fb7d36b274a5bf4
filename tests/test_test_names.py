"""Test files have unique basenames: tests/ has no __init__.py, so two test_x.py in different
directories pass when run alone but stop the whole suite at collection ("import file
mismatch"). Checked here, where running one directory's tests shows it."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).parent


def test_test_files_have_unique_basenames():
    counts = Counter(p.name for p in TESTS.rglob("test_*.py"))
    twice = sorted(
        str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py") if counts[p.name] > 1
    )
    assert twice == [], f"rename one of each: {twice}"
