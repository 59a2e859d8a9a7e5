"""The import floor of an HTTP function (flightdeck.bench.coldstart.LIBRARY_FLOORS): what Powertools'
event handler costs once it validates, before any code of ours.

Importing `aws_lambda_powertools.event_handler` alone leaves out what a validating resolver loads
(its OpenAPI and validation modules, and the request-model machinery a route with a pydantic body
builds when it is registered); every HTTP function of ours with a body route pays that. This module is that much and
no more: one validating resolver, one route taking one pydantic body. Nothing here is called.
"""

from __future__ import annotations

from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from pydantic import BaseModel


class Body(BaseModel):
    text: str


app = APIGatewayRestResolver(enable_validation=True)


@app.post("/floor")
def post(body: Body) -> dict[str, str]:
    return {"text": body.text}
