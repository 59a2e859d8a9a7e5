"""Commands that operate a deployment on AWS: `flightdeck deploy`, `status`, `logs` and `check`.

CLI tools, like `flightdeck peers`: kept out of the Lambda asset (infra/bundling.TOOLS), and no module that
Lambda runs imports them. Each checks what it needs before it acts and says what is missing, with the fix.
"""
