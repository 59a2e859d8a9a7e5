"""A configuration value refused together with its fix, for the deployment file's check to show both."""

from __future__ import annotations


class InvalidValue(ValueError):
    """What is wrong (the message), what to write instead (`fix`), and where below the object that refused it the
    value lies (`at`, e.g. ("skills", 2, "id")), so that the check names that key, not only its agent."""

    def __init__(self, message: str, fix: str, at: tuple[str | int, ...] = ()):
        super().__init__(message)
        self.fix = fix
        self.at = at
