"""The web console on AWS (deploy.console = true): the repository's console/ served at /console/ of the
agent's own REST API, so the page and the API share an origin (no CORS) and the page is a client of the
public API alone. The static files are public; every datum the page shows comes from the API's peer routes,
which refuse a request without the user's token as they refuse any other (401/403).

Each file is a GET method with a MOCK integration whose response template is the file itself, base64-encoded
and decoded by API Gateway ($util.base64Decode): no Lambda runs, nothing is in the Lambda asset, no bucket and
no custom resource to upload with (about 70 KB of templates, far under API Gateway's limits). The page's
<base href="/console/"> gets the stage in front ($context.stage), so its relative URLs and the API's
paths resolve under /prod/.
"""

from __future__ import annotations

import base64
from pathlib import Path

from aws_cdk import Acknowledgment, Validations
from aws_cdk import aws_apigateway as apigateway
from constructs import Construct

CONSOLE_DIR = Path(__file__).resolve().parents[1] / "console"
BASE_MARKER = '<base href="/console/">'
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
}
# The same headers the local gateway sends (flightdeck.local.console_files): our scripts, our origin. The
# policy holds single quotes, which a static header mapping ('value') cannot: the template sets it instead.
CSP = "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'self'; frame-ancestors 'none'"
SET_CSP = f'#set($context.responseOverride.header.Content-Security-Policy = "{CSP}")'
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
PUBLIC_REASON = (
    "The console's static files (HTML, CSS, JavaScript of the repository's console/) are public by design and "
    "hold no data: the page calls the agent's peer routes with the user's bearer token, which the peer "
    "authorizer and the functions check as for any other caller."
)


def decoded(text: str) -> str:
    """A response template that is `text` once API Gateway renders it (base64: no VTL character in it)."""
    return f'$util.base64Decode("{base64.b64encode(text.encode()).decode()}")'


def page_template(html: str) -> str:
    """index.html with its <base> under the stage: /prod/console/ on AWS, /console/ locally."""
    before, marker, after = html.partition(BASE_MARKER)
    if not marker:
        raise ValueError(f"console/index.html has no {BASE_MARKER}")
    return decoded(before + '<base href="/') + "$context.stage" + decoded('/console/">' + after)


def console_files(root: Path = CONSOLE_DIR) -> dict[str, Path]:
    """The console's files by their path under /console/ (what is served: HTML, CSS, JavaScript)."""
    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.suffix in TYPES}


class WebConsole(Construct):
    """GET /console (the page) and GET /console/<file> for each file of console/, MOCK integrations."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        rest_api: apigateway.RestApi,
        request_validator: apigateway.IRequestValidator,
        root: Path = CONSOLE_DIR,
    ):
        super().__init__(scope, id)
        self.methods: dict[str, apigateway.Method] = {}
        files = console_files(root)
        if "index.html" not in files:
            raise ValueError(f"{root} has no index.html")
        for path, file in {"": files["index.html"], **files}.items():
            text = file.read_text(encoding="utf-8")
            template = SET_CSP + (
                page_template(text) if file.name == "index.html" and file.parent == root else decoded(text)
            )
            headers = {"Content-Type": TYPES[file.suffix], **SECURITY_HEADERS}
            resource = rest_api.root.resource_for_path("console" + (f"/{path}" if path else ""))
            method = resource.add_method(
                "GET",
                apigateway.MockIntegration(
                    request_templates={"application/json": '{"statusCode": 200}'},
                    passthrough_behavior=apigateway.PassthroughBehavior.NEVER,
                    integration_responses=[
                        apigateway.IntegrationResponse(
                            status_code="200",
                            response_templates={"application/json": template},
                            response_parameters={f"method.response.header.{k}": f"'{v}'" for k, v in headers.items()},
                        )
                    ],
                ),
                authorization_type=apigateway.AuthorizationType.NONE,
                request_validator=request_validator,
                method_responses=[
                    apigateway.MethodResponse(
                        status_code="200",
                        response_parameters={f"method.response.header.{k}": True for k in headers},
                    )
                ],
            )
            for rule in ("AwsSolutions-APIG4", "AwsSolutions-COG4"):
                Validations.of(method).acknowledge(Acknowledgment(id=rule, reason=PUBLIC_REASON))
            self.methods[path] = method
