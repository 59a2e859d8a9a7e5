"""The pydantic part of every function's import floor (flightdeck.bench.coldstart.LIBRARY_FLOORS).

Pydantic 2 loads its modules lazily: `import pydantic` alone costs next to nothing, and the first model
defined loads the model machinery and its schema builder. A function that uses pydantic at all pays that
once; this module is that much and no more: one model. Nothing here is called.
"""

from __future__ import annotations

from pydantic import BaseModel


class Floor(BaseModel):
    text: str
