"""Flightdeck serverless: asynchronous, secure agent-to-agent delegation on AWS."""

__version__ = "0.1.0"
