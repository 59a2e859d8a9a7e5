"""What code outside the A2A add-on needs of it, in a module that imports nothing, so that a function
which serves no A2A task need not load the add-on (flightdeck.domain.a2a.tasks, a2a_client, a2a_models)."""

from __future__ import annotations

# The kinds of the add-on's queue messages: a push notification (the delivery queue), a poll of an
# A2A peer's task (the timers queue).
PUSH_KIND = "a2a_push"
POLL_KIND = "a2a_poll"
# What a message to this agent may carry (flightdeck.domain.a2a.tasks); the agent card's defaultInputModes.
INPUT_MODES = ("text/plain", "text/*", "application/json")
