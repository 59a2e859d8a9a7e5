from local_fake_handlers._http_echo import handler

__all__ = ["handler"]
