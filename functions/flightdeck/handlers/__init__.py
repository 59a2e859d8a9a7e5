"""The Lambda entry points, one module per function (topology.HANDLERS)."""

import gc

# A function's init phase is billed and is cold-start latency, and what its imports make lives as long as the
# process: the collector, scanning it, finds nothing. Off while a handler's modules load; lambda_entry turns it
# back on, with all of that frozen out of its scans (flightdeck.observability).
gc.disable()
