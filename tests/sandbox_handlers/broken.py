"""Fails its init: importing it raises."""

raise RuntimeError("broken at import")
