"""The first module of every import floor (flightdeck.bench.coldstart.LIBRARY_FLOORS): the collector off.

A function's init runs with the garbage collector off (flightdeck.handlers), so the libraries' own collections
during its imports are skipped too. The floors under its ratios are measured the same way, so that what the
handler saves there is not counted as its own code costing less.
"""

import gc

gc.disable()
