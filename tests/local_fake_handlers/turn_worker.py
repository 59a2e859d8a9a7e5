from ._queue_recorder import handler

__all__ = ["handler"]
