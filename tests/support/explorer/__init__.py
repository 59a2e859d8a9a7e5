"""The crash-point explorer (issue 24): tests/integration/test_crash_points.py runs it; docs/ARCHITECTURE.md §3 says what it checks."""
