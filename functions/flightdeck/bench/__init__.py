"""`flightdeck bench`: what a delegation costs on AWS and how the system behaves under load.

Counted on the local stack (moto): AWS requests, Lambda invocations and API
Gateway requests per delegation round trip (flightdeck.bench.counter runs in
every agent process); priced with a dated table (prices-us-east-1.json);
compared with Step Functions `.waitForTaskToken` models (flightdeck.bench.stepfunctions)
and a Lambda durable functions model (flightdeck.bench.durable). Measured: per-think
requests and units over a 50-message conversation, many sessions at once on the example
deployment (flightdeck.bench.load), callback throughput (single vs batch endpoint),
timeout lateness, sweep reads, handler import time; flightdeck.bench.compare puts two
results side by side. Local
seconds are moto-bound: the benchmark reports counts and ratios, and says which
figures are estimates. See docs/PERFORMANCE.md.
"""
