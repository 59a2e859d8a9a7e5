"""A2A v1.0's method table on POST /a2a: for each method its params model, the converter to the core's
request (to_core: flightdeck.domain.a2a.from_v1), the core's implementation, and the converter of its answer to
v1.0 JSON (to_wire).

flightdeck.api.a2a_routes holds the JSON-RPC envelope and v0.3's table, and routes a request by its method
name (no name is shared between the versions) and its A2A-Version; this module imports no v0.3 table, params
or model (tests/unit/test_import_graph.py). The streaming methods are served as Server-Sent Events by
flightdeck.api.a2a_stream_routes, each event through `wire_v1.event_to_wire`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from flightdeck.domain.a2a import core_models as core
from flightdeck.domain.a2a import from_v1, listing, push
from flightdeck.domain.a2a import tasks as a2a
from flightdeck.domain.a2a import wire_v1 as v1
from flightdeck.domain.a2a.ports import ports
from flightdeck.domain.a2a.protocol import EXTENDED_CARD_NOT_CONFIGURED, A2AError
from flightdeck.domain.numerals import parse_nonneg_int
from flightdeck.domain.ports import Deps

Core = Callable[[Deps, Any, "int | None", "str | None"], Any]


@dataclass(frozen=True)
class Method:
    params: type[BaseModel]
    to_core: Callable[[Any], Any]  # the v1.0 params model -> the core's params
    call: Core | None  # None: a streaming method (flightdeck.api.a2a_stream_routes)
    to_wire: Callable[[Any], Any]  # the core's answer -> v1.0 JSON


def _list_push(deps: Deps, params: v1.ListPushConfigsRequest, remaining_ms: int | None, caller: str | None) -> Any:
    views = push.list_push_configs(deps, core.ListPushConfigsRequest(taskId=params.taskId), remaining_ms, caller)
    offset = parse_nonneg_int(params.pageToken) if params.pageToken else 0
    if offset is None:
        raise A2AError(-32602, "Invalid params: pageToken is not one this listing handed out", {"field": "pageToken"})
    size = params.pageSize or len(views) or 1
    page = views[offset : offset + size]
    more = offset + size < len(views)
    return {"configs": [v1.push_config_to_wire(v) for v in page], "nextPageToken": str(offset + size) if more else ""}


def _list_tasks(deps: Deps, params: v1.ListTasksRequest, remaining_ms: int | None, caller: str | None) -> Any:
    from flightdeck.adapters.a2a_task_index import InvalidPageToken  # noqa: PLC0415 - only ListTasks reads it

    state = v1.STATE_TO_CORE.get(params.status or "") if params.status != "TASK_STATE_UNSPECIFIED" else None
    return listing.list_tasks(
        deps,
        getattr(ports(deps), "index"),  # noqa: B009 - the on-demand ports' (flightdeck.wiring)
        caller,
        context_id=params.contextId,
        state=state,
        page_size=params.pageSize,
        page_token=params.pageToken,
        history_length=params.historyLength,
        updated_after=params.statusTimestampAfter,
        include_artifacts=bool(params.includeArtifacts),
        invalid_token=InvalidPageToken,
        render=v1.task_to_wire,
    )


def _no_extended_card(deps: Deps, params: Any, remaining_ms: int | None, caller: str | None) -> Any:
    raise A2AError(EXTENDED_CARD_NOT_CONFIGURED, "Authenticated Extended Card is not configured")


def _same(value: Any) -> Any:
    return value


METHODS: dict[str, Method] = {
    "SendMessage": Method(v1.SendMessageRequest, from_v1.send_request, a2a.send_message, v1.send_result_to_wire),
    "SendStreamingMessage": Method(v1.SendMessageRequest, from_v1.send_request, None, v1.event_to_wire),
    "GetTask": Method(v1.GetTaskRequest, from_v1.get_task_request, a2a.get_task, v1.task_to_wire),
    "ListTasks": Method(v1.ListTasksRequest, _same, _list_tasks, _same),
    "CancelTask": Method(v1.CancelTaskRequest, from_v1.cancel_request, a2a.cancel_task, v1.task_to_wire),
    "SubscribeToTask": Method(v1.SubscribeToTaskRequest, from_v1.subscribe_request, None, v1.event_to_wire),
    "CreateTaskPushNotificationConfig": Method(
        v1.CreatePushConfigRequest, from_v1.create_push_request, push.set_push_config, v1.push_config_to_wire
    ),
    "GetTaskPushNotificationConfig": Method(
        v1.PushConfigRequest, from_v1.push_config_request, push.get_push_config, v1.push_config_to_wire
    ),
    "ListTaskPushNotificationConfigs": Method(v1.ListPushConfigsRequest, _same, _list_push, _same),
    "DeleteTaskPushNotificationConfig": Method(
        v1.PushConfigRequest,
        from_v1.push_config_request,
        push.delete_push_config,
        lambda _: {},  # google.protobuf.Empty
    ),
    "GetExtendedAgentCard": Method(v1.GetExtendedAgentCardRequest, _same, _no_extended_card, _same),
}
STREAM_METHODS = frozenset(name for name, m in METHODS.items() if m.call is None)
