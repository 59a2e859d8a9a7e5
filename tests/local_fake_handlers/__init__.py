"""Stand-in handler modules for testing flightdeck.local without the real handlers.

Module names mirror topology's handler names; HTTP ones echo the event they got,
queue ones record what they received (a JSON line on stdout) and fail on request.
"""
