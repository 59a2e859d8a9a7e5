"""A2A v1.0's requests (flightdeck.domain.a2a.wire_v1, validated by the v1.0 method table) as the core's requests
(flightdeck.domain.a2a.core_models), which are shaped like them: roles and states by the core's names, a config
made in v1.0 marked so its pushes go out in v1.0's shape, an authentication's one scheme as a list of one.
Imports nothing of v0.3 (tests/unit/test_import_graph.py).
"""

from __future__ import annotations

from flightdeck.domain.a2a import core_models as core
from flightdeck.domain.a2a import wire_v1 as v1


def part(value: v1.Part) -> core.Part:
    common = {"metadata": value.metadata} if value.metadata else {}
    if value.text is not None:
        return core.Part(text=value.text, **common)
    if "data" in value.model_fields_set:
        return core.Part(data=value.data, **common)
    return core.Part(
        raw=value.raw,
        url=value.url if value.raw is None else None,
        mediaType=value.mediaType or None,
        filename=value.filename or None,
        **common,
    )


def message(value: v1.Message) -> core.Message:
    return core.Message(
        messageId=value.messageId,
        role=v1.ROLE_TO_CORE[value.role],
        parts=[part(p) for p in value.parts],
        contextId=value.contextId,
        taskId=value.taskId,
        referenceTaskIds=value.referenceTaskIds,
        metadata=value.metadata,
    )


def push_config(value: v1.TaskPushNotificationConfig) -> core.PushConfig:
    auth = value.authentication
    return core.PushConfig(
        url=value.url,
        id=value.id or None,
        token=value.token or None,
        authentication=core.Authentication(schemes=[auth.scheme], credentials=auth.credentials or None)
        if auth is not None
        else None,
        a2aVersion="1.0",  # a config made in v1.0 gets v1.0's pushes
    )


def send_request(request: v1.SendMessageRequest) -> core.SendMessageRequest:
    config = request.configuration or v1.SendMessageConfiguration()
    push = config.taskPushNotificationConfig
    return core.SendMessageRequest(
        message=message(request.message),
        configuration=core.SendConfiguration(
            acceptedOutputModes=config.acceptedOutputModes,
            historyLength=config.historyLength,
            returnImmediately=config.returnImmediately,
            taskPushNotificationConfig=None if push is None else push_config(push),
        ),
        metadata=request.metadata,
    )


def get_task_request(request: v1.GetTaskRequest) -> core.GetTaskRequest:
    return core.GetTaskRequest(id=request.id, historyLength=request.historyLength)


def cancel_request(request: v1.CancelTaskRequest) -> core.CancelTaskRequest:
    return core.CancelTaskRequest(id=request.id, metadata=request.metadata)


def subscribe_request(request: v1.SubscribeToTaskRequest) -> core.SubscribeToTaskRequest:
    return core.SubscribeToTaskRequest(id=request.id)


def create_push_request(request: v1.CreatePushConfigRequest) -> core.TaskPushConfig:
    return core.TaskPushConfig(taskId=request.taskId, **dict(push_config(request)))


def push_config_request(request: v1.PushConfigRequest) -> core.PushConfigRequest:
    return core.PushConfigRequest(taskId=request.taskId, id=request.id)
