"""In-memory fakes of the domain's ports (flightdeck.domain.ports), for the fast unit tier.

tests/contract runs the same behaviour against MemoryState and the DynamoDB StateStore on moto, so a
test that passes on the fakes says something about the real thing.
"""
