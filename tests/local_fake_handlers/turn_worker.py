from local_fake_handlers._queue_recorder import handler

__all__ = ["handler"]
