"""A2A v0.3's params (flightdeck.domain.a2a.wire, validated by the v0.3 method table) as the core's requests
(flightdeck.domain.a2a.core_models): what the v0.3 table hands the core. The core answers in the record's shapes,
which are v0.3's JSON already.

What v0.3 says differently: parts carry a `kind` and a file is an object {bytes | uri, mimeType, name};
`configuration.blocking` (default false: absent configuration, absent blocking) is v1.0's returnImmediately
reversed; a push config is nested under pushNotificationConfig, its authentication lists schemes.
"""

from __future__ import annotations

from flightdeck.domain.a2a import core_models as core
from flightdeck.domain.a2a.wire import (
    DataPart,
    DeleteTaskPushNotificationConfigParams,
    FilePart,
    GetTaskPushNotificationConfigParams,
    ListTaskPushNotificationConfigParams,
    Message,
    MessageSendConfiguration,
    MessageSendParams,
    PushNotificationConfig,
    TaskIdParams,
    TaskPushNotificationConfig,
    TaskQueryParams,
    TextPart,
)


def part(value: TextPart | FilePart | DataPart) -> core.Part:
    if isinstance(value, TextPart):
        return core.Part(text=value.text, metadata=value.metadata)
    if isinstance(value, DataPart):
        return core.Part(data=value.data, metadata=value.metadata)
    return core.file_part(value.file, value.metadata)


def message(value: Message) -> core.Message:
    return core.Message(
        messageId=value.messageId,
        role=value.role,
        parts=[part(p) for p in value.parts],
        contextId=value.contextId,
        taskId=value.taskId,
        referenceTaskIds=value.referenceTaskIds,
        metadata=value.metadata,
    )


def push_config(value: PushNotificationConfig) -> core.PushConfig:
    auth = value.authentication
    return core.PushConfig(
        url=value.url,
        id=value.id,
        token=value.token,
        authentication=core.Authentication(schemes=auth.schemes, credentials=auth.credentials) if auth else None,
        a2aVersion=value.a2aVersion,
    )


def _configuration(config: MessageSendConfiguration | None) -> core.SendConfiguration:
    if config is None:
        return core.SendConfiguration(returnImmediately=True)  # v0.3's default: answer at once
    push = config.pushNotificationConfig
    return core.SendConfiguration(
        acceptedOutputModes=config.acceptedOutputModes,
        historyLength=config.historyLength,
        returnImmediately=not config.blocking,
        taskPushNotificationConfig=push_config(push) if push else None,
    )


def send_request(params: MessageSendParams) -> core.SendMessageRequest:
    return core.SendMessageRequest(
        message=message(params.message), configuration=_configuration(params.configuration), metadata=params.metadata
    )


def get_task_request(params: TaskQueryParams) -> core.GetTaskRequest:
    return core.GetTaskRequest(id=params.id, historyLength=params.historyLength)


def cancel_request(params: TaskIdParams) -> core.CancelTaskRequest:
    return core.CancelTaskRequest(id=params.id, metadata=params.metadata)


def subscribe_request(params: TaskIdParams) -> core.SubscribeToTaskRequest:
    return core.SubscribeToTaskRequest(id=params.id)


def create_push_request(params: TaskPushNotificationConfig) -> core.TaskPushConfig:
    config = push_config(params.pushNotificationConfig)
    return core.TaskPushConfig(taskId=params.taskId, **dict(config))


def get_push_request(params: GetTaskPushNotificationConfigParams) -> core.PushConfigRequest:
    return core.PushConfigRequest(taskId=params.id, id=params.pushNotificationConfigId)


def list_push_request(params: ListTaskPushNotificationConfigParams) -> core.ListPushConfigsRequest:
    return core.ListPushConfigsRequest(taskId=params.id)


def delete_push_request(params: DeleteTaskPushNotificationConfigParams) -> core.PushConfigRequest:
    return core.PushConfigRequest(taskId=params.id, id=params.pushNotificationConfigId)
