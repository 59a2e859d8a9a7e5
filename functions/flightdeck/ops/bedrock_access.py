"""Whether Bedrock will run a model id in a region for these credentials: it exists there, and it is enabled.

The offline shape check is model_ids.is_bedrock_model_id; this asks Bedrock (its control plane, `bedrock`):

- a model id (`anthropic.claude-...`): GetFoundationModel (exists in the region, lifecycle ACTIVE or LEGACY)
  and GetFoundationModelAvailability (the account's access: authorized, entitled, agreement accepted, region);
- an inference profile id (`us.anthropic.claude-...`) or ARN: GetInferenceProfile (ACTIVE), then each model it
  routes to as above;
- a foundation model ARN: its model id as above;
- a provisioned, custom or imported model ARN: not checked here (said so).

Each answer is a Verdict: ok, or what is wrong and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_MODEL_ACCESS_FIX = (
    "enable it for this account in the Bedrock console (Model access) in {region}, or choose a model that is "
    "(`aws bedrock list-foundation-models --region {region}`)"
)


@dataclass(frozen=True)
class Verdict:
    model_id: str
    ok: bool
    detail: str  # what Bedrock said, in a few words
    fix: str = ""


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def _is_profile(model_id: str) -> bool:
    if model_id.startswith("arn:"):
        return ":inference-profile/" in model_id or ":application-inference-profile/" in model_id
    # "<geography>.<vendor>.<model>": a model id has one dot before its version ("anthropic.claude-...").
    return model_id.split(":", 1)[0].count(".") >= 2


def _foundation_id(model_id: str) -> str | None:
    """The foundation model id a model id or foundation-model ARN names (None: another kind of ARN)."""
    if not model_id.startswith("arn:"):
        return model_id
    resource = model_id.split(":", 5)[-1]
    kind, _, name = resource.partition("/")
    return name if kind == "foundation-model" else None


def client(aws: Any, region: str) -> Any:
    """The Bedrock control plane client of a region (moto does not serve it: the tests stub this one)."""
    return aws.client("bedrock", region_name=region)


class BedrockAccess:
    """Asks one region's Bedrock control plane (a boto3 `bedrock` client)."""

    def __init__(self, client: Any):
        self.client = client
        self.region = str(client.meta.region_name)

    def check(self, model_id: str) -> Verdict:
        from botocore.exceptions import ClientError

        try:
            if _is_profile(model_id):
                return self._profile(model_id)
            foundation = _foundation_id(model_id)
            if foundation is None:
                return Verdict(model_id, True, "a provisioned, custom or imported model ARN: not checked here")
            return self._model(model_id, foundation)
        except ClientError as exc:
            if _code(exc) == "AccessDeniedException":
                return Verdict(
                    model_id,
                    False,
                    f"these credentials may not ask Bedrock about it ({exc.response['Error'].get('Message', '')})",
                    "allow bedrock:GetFoundationModel, bedrock:GetFoundationModelAvailability and "
                    "bedrock:GetInferenceProfile to the credentials that deploy, or check Model access in the console",
                )
            raise

    def _model(self, model_id: str, foundation: str) -> Verdict:
        from botocore.exceptions import ClientError

        try:
            details = self.client.get_foundation_model(modelIdentifier=foundation)["modelDetails"]
        except ClientError as exc:
            if _code(exc) not in ("ResourceNotFoundException", "ValidationException"):
                raise
            return Verdict(
                model_id,
                False,
                f"no model {foundation!r} in {self.region}",
                f"use a model id that `aws bedrock list-foundation-models --region {self.region}` lists, or an "
                "inference profile id (`aws bedrock list-inference-profiles`)",
            )
        status = str(details.get("modelLifecycle", {}).get("status", "ACTIVE"))
        if status not in ("ACTIVE", "LEGACY"):
            return Verdict(model_id, False, f"{foundation} is {status} in {self.region}", "choose an active model")
        available = self.client.get_foundation_model_availability(modelId=foundation)
        refusals = [
            f"{what} {value}"
            for what, value, wanted in (
                ("authorization", available.get("authorizationStatus"), "AUTHORIZED"),
                ("entitlement", available.get("entitlementAvailability"), "AVAILABLE"),
                ("region", available.get("regionAvailability"), "AVAILABLE"),
                ("agreement", available.get("agreementAvailability", {}).get("status"), "AVAILABLE"),
            )
            if value is not None and value != wanted
        ]
        if refusals:
            return Verdict(
                model_id,
                False,
                f"{foundation} is not enabled for this account in {self.region} ({', '.join(refusals)})",
                _MODEL_ACCESS_FIX.format(region=self.region),
            )
        suffix = " (legacy: it will be retired)" if status == "LEGACY" else ""
        return Verdict(model_id, True, f"{foundation} is enabled in {self.region}{suffix}")

    def _profile(self, model_id: str) -> Verdict:
        from botocore.exceptions import ClientError

        try:
            profile = self.client.get_inference_profile(inferenceProfileIdentifier=model_id)
        except ClientError as exc:
            if _code(exc) not in ("ResourceNotFoundException", "ValidationException"):
                raise
            return Verdict(
                model_id,
                False,
                f"no inference profile {model_id!r} in {self.region}",
                f"use one that `aws bedrock list-inference-profiles --region {self.region}` lists (its prefix is "
                "the geography it routes in: us., eu., apac., global.)",
            )
        if profile.get("status", "ACTIVE") != "ACTIVE":
            return Verdict(model_id, False, f"the inference profile is {profile.get('status')}", "choose an active one")
        for model in profile.get("models", []):
            foundation = _foundation_id(str(model.get("modelArn", "")))
            if foundation is None:
                continue
            verdict = self._model(model_id, foundation)
            if not verdict.ok:
                return verdict
        return Verdict(model_id, True, f"the inference profile and its models are enabled in {self.region}")
