"""The local model's markers (flightdeck.domain.scripted_model), as people trying it read them."""

from __future__ import annotations

# The local model's syntax, for people trying it (README "The local model's syntax", `flightdeck chat --help`):
# what each marker in a message makes the model do. One table, rendered in both places.
SYNTAX: tuple[tuple[str, str], ...] = (
    ("@agent task", "delegate the task to that agent (one tool call per mention, all at once)"),
    ("@agent:skill {json}", "call that agent's skill with JSON arguments (a skill its card offers)"),
    ("@agent task => {schema}", "delegate and ask for an answer matching a JSON Schema (or shorthand)"),
    ("!tool args", "run one of the agent's built-in tools with args"),
    ("!server__tool args", "call an MCP server's tool: JSON args, or text as its first required string"),
    ("?ask question?", "ask the caller that question first (the built-in ask_user tool)"),
    ("?answer text", "the answer this agent gives a delegate that asks it a question"),
    ("!prose", "answer in prose even where a schema is asked for (the demo's mismatch)"),
    ("anything else", "answered by the agent itself: word count and the words reversed"),
)
