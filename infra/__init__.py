"""CDK infrastructure of Flightdeck: one stack per agent, one construct per capability.

- stack.py       FlightdeckStack: composes the constructs below
- state.py       the DynamoDB table (TTL, deadline index, PITR)
- queues.py      SQS queues from flightdeck.topology, their DLQs and DLQ alarms
- secret.py      the callback HMAC key in Secrets Manager
- functions.py   one Lambda function per handler module, SQS event sources
- access.py      least privilege: what each function may touch
- api.py         the REST API: one proxy method per topology route
- schedule.py    the EventBridge rule of the backstop sweep
- alarms.py      the SNS topic every alarm notifies
- dashboard.py   the operations dashboard and the SessionsOverdue alarm
- usage_plans.py per-peer usage plans and API keys
- account.py     API Gateway's account-wide CloudWatch Logs role, once per account and region
- bundling.py    the code asset, bundled locally with pip (no Docker)
- environment.py the functions' environment (peers found at run time), validated with flightdeck.settings
- deployment.py  the app: stacks from a deployment TOML, cdk-nag
"""
