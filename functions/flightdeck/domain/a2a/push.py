"""Push notifications, server side: the tasks/pushNotificationConfig/* methods (a task's webhooks, stored with
it), and `notify`: a task that ended or waits for input is enqueued once per webhook on the delivery queue (kind
"a2a_push"), which the delivery worker POSTs (flightdeck.domain.a2a.push_delivery).
"""

from __future__ import annotations

import json
from typing import Any

from flightdeck.domain.a2a.checks import validate_push_config, visible_task
from flightdeck.domain.a2a.constants import PUSH_KIND
from flightdeck.domain.a2a.core_models import ListPushConfigsRequest, PushConfigRequest, TaskPushConfig
from flightdeck.domain.a2a.ports import TaskRecord, ports
from flightdeck.domain.a2a.protocol import INVALID_PARAMS, A2AError
from flightdeck.domain.a2a.render import render_task
from flightdeck.domain.ports import Deps
from flightdeck.observability import count

# An SQS message holds 256 KB: a push whose task is larger goes without its history.
MAX_PUSH_TASK_BYTES = 200_000


def notify(deps: Deps, rec: TaskRecord) -> int:
    """Enqueue the task for every push config it has (at least once), then mark it notified: when it
    ended, and when it waits for input (continuing it clears the mark)."""
    a2a = ports(deps).store
    configs = a2a.list_push(rec.session_id, rec.key)
    if configs:
        task = render_task(deps, rec)
        if len(json.dumps(task)) > MAX_PUSH_TASK_BYTES:
            task["history"] = []
        for config in configs:
            deps.queues.send_delivery(
                {
                    "kind": PUSH_KIND,
                    "session_id": rec.session_id,
                    "task_id": rec.task_id,
                    "config": config,
                    "task": task,
                    "created_ms": deps.clock.now_ms(),
                }
            )
        count("A2APushesQueued", len(configs))
    a2a.mark_notified(rec.session_id, rec.key)
    return len(configs)


# --- tasks/pushNotificationConfig/* -----------------------------------------------------------


def _config_view(task_id: str, config: dict[str, Any]) -> dict[str, Any]:
    return {"taskId": task_id, "pushNotificationConfig": {k: v for k, v in config.items() if k != "a2aVersion"}}


def set_push_config(
    deps: Deps, params: TaskPushConfig, remaining_ms: int | None = None, caller: str | None = None
) -> dict[str, Any]:
    rec = visible_task(deps, params.taskId, caller)
    config = validate_push_config(deps, params, rec.task_id)
    ports(deps).store.put_push(rec.session_id, rec.key, config, deps.settings.session_retention_ms)
    return _config_view(rec.task_id, config)


def get_push_config(
    deps: Deps, params: PushConfigRequest, remaining_ms: int | None = None, caller: str | None = None
) -> dict[str, Any]:
    rec = visible_task(deps, params.taskId, caller)
    a2a = ports(deps).store
    if params.id:
        config = a2a.get_push(rec.session_id, rec.key, params.id)
    else:
        configs = a2a.list_push(rec.session_id, rec.key)
        config = next((c for c in configs if c.get("id") == rec.task_id), configs[0] if configs else None)
    if config is None:
        raise A2AError(
            INVALID_PARAMS,
            "no such push notification config for this task",
            {"taskId": rec.task_id, "pushNotificationConfigId": params.id},
        )
    return _config_view(rec.task_id, config)


def list_push_configs(
    deps: Deps, params: ListPushConfigsRequest, remaining_ms: int | None = None, caller: str | None = None
) -> list[dict[str, Any]]:
    rec = visible_task(deps, params.taskId, caller)
    return [_config_view(rec.task_id, c) for c in ports(deps).store.list_push(rec.session_id, rec.key)]


def delete_push_config(
    deps: Deps,
    params: PushConfigRequest,
    remaining_ms: int | None = None,
    caller: str | None = None,
) -> None:
    rec = visible_task(deps, params.taskId, caller)
    ports(deps).store.delete_push(rec.session_id, rec.key, str(params.id))
    return None
