"""ListTasks (A2A v1.0): the caller's own tasks, latest update first, a page at a time.

What a page costs: the peer-token check every peer route makes, one Query on the keys-only tasks
index (flightdeck.adapters.a2a_task_index), one GetItem per task on the page (strongly consistent: the
task as it stands), and one Query with Select COUNT for totalSize; with historyLength, one Query more per
task for its messages. With contextId the index is not read: one Query of that context's tasks (its own
partition), paged in memory. A status or statusTimestampAfter filter applies to the page as read, so such
a page may hold fewer than pageSize tasks; nextPageToken says whether more follow.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from flightdeck.domain.a2a.ports import parse_task_id, ports
from flightdeck.domain.a2a.protocol import INVALID_PARAMS, A2AError
from flightdeck.domain.a2a.render import render_task
from flightdeck.domain.numerals import parse_nonneg_int
from flightdeck.domain.peers import require_caller, visible_to
from flightdeck.domain.ports import Deps

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100


class TaskIndexPort(Protocol):
    def owned_task_ids(self, owner: str, limit: int, token: str | None) -> tuple[list[str], str | None]: ...
    def count_owned(self, owner: str) -> int: ...
    def context_task_ids(self, owner: str, session_id: str) -> list[str]: ...


def _ms(timestamp: str) -> int:
    try:
        return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        raise A2AError(INVALID_PARAMS, "statusTimestampAfter is not an RFC 3339 timestamp") from None


def list_tasks(
    deps: Deps,
    index: TaskIndexPort,
    caller: str | None,
    *,
    context_id: str | None = None,
    state: str | None = None,
    page_size: int | None = None,
    page_token: str | None = None,
    history_length: int | None = None,
    updated_after: str | None = None,
    include_artifacts: bool = False,
    invalid_token: type[Exception] = ValueError,
    render: Callable[[dict[str, Any]], dict[str, Any]] = lambda task: task,
) -> dict[str, Any]:
    """{tasks, nextPageToken, pageSize, totalSize}; tasks rendered by `render` (the wire's Task)."""
    require_caller(deps.settings.inbound_auth, caller)
    size = page_size or DEFAULT_PAGE_SIZE
    after = _ms(updated_after) if updated_after else None
    store = ports(deps).store
    if caller is None:  # authentication off: tasks have no owner, so none is the caller's
        return {"tasks": [], "nextPageToken": "", "pageSize": size, "totalSize": 0}
    if context_id:
        ids, next_token, total = _context_page(index, caller, context_id, size, page_token)
    else:
        try:
            ids, next_token = index.owned_task_ids(caller, size, page_token)
        except invalid_token as exc:
            raise A2AError(INVALID_PARAMS, f"Invalid params: {exc}", {"field": "pageToken"}) from None
        total = index.count_owned(caller)
    tasks = []
    for task_id in ids:
        parsed = parse_task_id(task_id)
        rec = store.get_task(*parsed) if parsed else None
        if rec is None or not visible_to(rec.owner, caller) or not rec.owner:
            continue  # expired (TTL) since the index was read
        if state and rec.state != state:
            continue
        if after is not None and rec.updated_ms <= after:
            continue
        task = render_task(deps, rec, history_length or 0)
        if not include_artifacts:
            task.pop("artifacts", None)
        if not history_length:
            task.pop("history", None)
        tasks.append(render(task))
    return {"tasks": tasks, "nextPageToken": next_token or "", "pageSize": size, "totalSize": total}


def _context_page(
    index: TaskIndexPort, caller: str, context_id: str, size: int, token: str | None
) -> tuple[list[str], str | None, int]:
    """One context's tasks of the caller, latest update first: one Query of its partition; the token is
    an offset."""
    ids = index.context_task_ids(caller, context_id)
    offset = 0
    if token:
        try:
            text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        except (ValueError, binascii.Error, UnicodeDecodeError):
            text = ""
        given = parse_nonneg_int(text.removeprefix("ctx:")) if text.startswith("ctx:") else None
        if given is None:
            raise A2AError(INVALID_PARAMS, "Invalid params: pageToken is not one this listing handed out")
        offset = given
    more = offset + size < len(ids)
    next_token = base64.urlsafe_b64encode(f"ctx:{offset + size}".encode()).rstrip(b"=").decode() if more else None
    return ids[offset : offset + size], next_token, len(ids)
