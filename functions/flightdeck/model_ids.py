"""Bedrock model ids: the shapes Converse takes (a model id, an inference profile id, an ARN), the example the
file's problems suggest, and the fix they give."""

from __future__ import annotations

import re

# Bedrock's model ids, offline: "<vendor>.<model>" (anthropic.claude-3-5-haiku-20241022-v1:0), a cross-region
# inference profile "<geography>.<vendor>.<model>" (us., eu., apac., global. ...), or an ARN of a foundation
# model, an inference profile (system or application), a provisioned, custom or imported model. Whether the
# model exists in the region and is enabled for the account only Bedrock can say (`flightdeck check --aws`).
EXAMPLE_MODEL_ID = "us.anthropic.claude-3-5-haiku-20241022-v1:0"
_MODEL_ID = re.compile(r"^(?:[a-z]{2,8}(?:-[a-z]{2,8})?\.)?[a-z][a-z0-9-]{1,31}\.[a-z0-9][A-Za-z0-9._:-]{0,127}$")
_MODEL_ARN = re.compile(
    r"^arn:aws(?:-[a-z]+)*:bedrock:[a-z]{2}(?:-[a-z]+)+-\d:(?:\d{12})?:"
    r"(?:foundation-model|inference-profile|application-inference-profile|provisioned-model|custom-model"
    r"|imported-model|custom-model-deployment)/[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$"
)
MODEL_ID_FIX = (
    f'write a model id "<vendor>.<model>" (e.g. "anthropic.claude-3-5-haiku-20241022-v1:0"), an inference '
    f'profile id "<region>.<vendor>.<model>" (e.g. "{EXAMPLE_MODEL_ID}") or a model or inference profile ARN; '
    "`aws bedrock list-foundation-models` and `aws bedrock list-inference-profiles` list them"
)


def is_bedrock_model_id(model_id: str) -> bool:
    """Whether model_id has one of the shapes Bedrock's Converse takes (not whether the model exists)."""
    return bool(_MODEL_ID.match(model_id) or _MODEL_ARN.match(model_id))
