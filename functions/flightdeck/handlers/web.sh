#!/bin/sh
# The handler of a streaming function (infra/functions.py): the Lambda Web Adapter's /opt/bootstrap
# (AWS_LAMBDA_EXEC_WRAPPER) runs this, then forwards each invocation to the server it starts
# (flightdeck.handlers.web). The runtime's own directory holds the AWS SDK the asset leaves out.
cd "$LAMBDA_TASK_ROOT" || exit 1
PYTHONPATH="$LAMBDA_TASK_ROOT:$LAMBDA_RUNTIME_DIR${PYTHONPATH:+:$PYTHONPATH}" exec python3 -m flightdeck.handlers.web
