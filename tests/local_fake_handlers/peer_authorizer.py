# The real authorizer: the stand-in stack has the example file's peers and usage plans in moto.
from flightdeck.handlers.peer_authorizer import handler

__all__ = ["handler"]
