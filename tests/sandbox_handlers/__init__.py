"""Handler modules for the sandbox tests (tests/unit/test_local_sandbox.py), run in sandboxes.

Where a test goes through a FunctionRegistry, a module is named after the topology function it
stands in for (turn_worker, session_events); the others are named for what they do.
"""
