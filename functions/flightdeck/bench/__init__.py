"""`flightdeck bench`: what a delegation costs on AWS and how the system behaves under load.

Counted on the local stack (moto): AWS requests, Lambda invocations and API
Gateway requests per delegation round trip (flightdeck.bench.counter runs in
every agent process); priced with a dated table (prices-us-east-1.json);
compared with a Step Functions `.waitForTaskToken` model
(flightdeck.bench.stepfunctions). Measured: callback throughput (single vs
batch endpoint), timeout lateness, sweep reads, handler import time. Local
seconds are moto-bound: the benchmark reports counts and ratios, and says which
figures are estimates. See docs/PERFORMANCE.md.
"""
