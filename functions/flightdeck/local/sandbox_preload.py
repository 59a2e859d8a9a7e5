"""What the sandboxes' fork server imports once, for every sandbox it forks (flightdeck.local.sandbox).

Importing this module does it: the fork server's only hook is importing the modules it is told to.

- Libraries: boto3, pydantic, Powertools, requests; and the botocore data every function's clients
  load (service models, endpoints), into boto3's default session, which the adapters' clients use.
  Creating that session reads no credentials or region (its clients do, in the sandbox).
- The agent host's modules, which each sandbox imports again as multiprocessing runs the host's
  main module in it (flightdeck.local.sandbox).
- flightdeck's shared modules: the domain, the API, the adapters, wiring, settings, observability.
  The fork server runs in the agent host's environment, which is the agent's Lambda environment;
  a sandbox adds only the variables Lambda sets per function (AWS_LAMBDA_FUNCTION_NAME...), and
  none of these modules reads one when imported (tests/unit/test_local_sandbox.py keeps it so).
  Importing them here is therefore importing them in each sandbox, minus the time.

The handler modules are not preloaded: importing one is its function's init (it reads and checks
the settings), done in each sandbox, in its function's environment. A module that fails to import
here is left to the sandboxes, where its failure is that function's init error.
"""

from __future__ import annotations

import importlib
import pkgutil

LIBRARIES = (
    "boto3",
    "boto3.dynamodb.conditions",
    "botocore.session",
    "pydantic",
    "pydantic.dataclasses",
    "aws_lambda_powertools.logging",
    "aws_lambda_powertools.metrics",
    "aws_lambda_powertools.event_handler",
    "aws_lambda_powertools.event_handler.middlewares.openapi_validation",
    "aws_lambda_powertools.utilities.batch",
    "aws_lambda_powertools.utilities.parameters",
    "aws_lambda_powertools.utilities.typing",
    "requests",
)
# The services every function calls locally, and the botocore data files every client reads.
SERVICES = ("dynamodb", "sqs", "lambda")
BOTOCORE_DATA = ("endpoints", "partitions", "_retry", "sdk-default-configuration")
HOST_MODULES = (
    "flightdeck.local.gateway",
    "flightdeck.local.lambda_api",
    "flightdeck.local.peer_gate",
    "flightdeck.local.pollers",
    "flightdeck.local.resources",
)
# Every module of these packages, and these modules.
SHARED_PACKAGES = ("flightdeck.domain", "flightdeck.api", "flightdeck.adapters")
SHARED_MODULES = ("flightdeck.settings", "flightdeck.observability", "flightdeck.wiring")


def shared_modules() -> list[str]:
    names = list(SHARED_MODULES)
    for package_name in SHARED_PACKAGES:
        try:
            package = importlib.import_module(package_name)
        except Exception:  # noqa: BLE001 - left to the sandboxes (see the module doc)
            continue
        names.append(package_name)
        names.extend(m.name for m in pkgutil.walk_packages(package.__path__, f"{package_name}."))
    return names


def load_botocore_data() -> None:
    """Parse the data files boto3's default session gives its clients, once (each is cached by its loader)."""
    import boto3

    session = boto3.session.Session()
    boto3.DEFAULT_SESSION = session  # what boto3.client() uses (boto3.setup_default_session does the same)
    loader = session._session.get_component("data_loader")  # noqa: SLF001 - its botocore session
    for name in BOTOCORE_DATA:
        loader.load_data(name)
    for service in SERVICES:
        for kind in ("service-2", "endpoint-rule-set-1"):
            loader.load_service_model(service, kind)


def preload() -> list[str]:
    """Import what the sandboxes share; returns what failed (each sandbox does it itself)."""
    failed = []
    for name in (*LIBRARIES, *HOST_MODULES, *shared_modules()):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - left to the sandboxes (see the module doc)
            failed.append(name)
    try:
        load_botocore_data()
    except Exception:  # noqa: BLE001 - left to the sandboxes
        failed.append("botocore data")
    return failed


preload()
