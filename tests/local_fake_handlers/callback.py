from ._http_echo import handler

__all__ = ["handler"]
