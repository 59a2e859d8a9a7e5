"""The local moto server's wrapper: one request at a time, and DynamoDB's transaction idempotency."""

from __future__ import annotations

import io
import json

from flightdeck.local.moto_app import IDEMPOTENCY_WINDOW_S, SerializedApp


class CountingApp:
    """Stands in for moto: answers a transaction 200 the first time, then 400 (its conditions now fail)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, environ, start_response):
        self.calls += 1
        environ["wsgi.input"].read()
        if self.calls == 1:
            start_response("200 OK", [("Content-Type", "application/x-amz-json-1.0")])
            return [b"{}"]
        start_response("400 Bad Request", [("Content-Type", "application/x-amz-json-1.0")])
        return [b'{"__type": "TransactionCanceledException"}']


def call(app, token="tok-1", target="DynamoDB_20120810.TransactWriteItems"):
    body = json.dumps({"TransactItems": [], **({"ClientRequestToken": token} if token else {})}).encode()
    environ = {"HTTP_X_AMZ_TARGET": target, "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body)}
    seen = {}
    out = app(environ, lambda status, headers, exc_info=None: seen.update(status=status))
    return seen["status"], b"".join(out)


def test_a_retried_transaction_with_the_same_token_gets_the_first_success_without_running_again():
    moto = CountingApp()
    app = SerializedApp(moto)
    assert call(app) == ("200 OK", b"{}")
    assert call(app) == ("200 OK", b"{}")
    assert moto.calls == 1


def test_another_token_or_no_token_runs_the_transaction():
    moto = CountingApp()
    app = SerializedApp(moto)
    call(app, "tok-1")
    assert call(app, "tok-2")[0].startswith("400")
    assert call(app, None)[0].startswith("400")
    assert moto.calls == 3


def test_a_failed_transaction_is_not_remembered_and_the_window_ends():
    now = [0.0]
    moto = CountingApp()
    moto.calls = 1  # every answer is now a failure
    app = SerializedApp(moto, clock=lambda: now[0])
    assert call(app)[0].startswith("400") and call(app)[0].startswith("400")
    assert moto.calls == 3
    fresh = CountingApp()
    app = SerializedApp(fresh, clock=lambda: now[0])
    call(app)
    now[0] += IDEMPOTENCY_WINDOW_S + 1
    assert call(app)[0].startswith("400")  # forgotten: DynamoDB remembers a token for 10 minutes
    assert fresh.calls == 2


def test_a_table_copied_for_a_transaction_shares_its_stream_records_and_a_rollback_still_drops_its_own():
    import copy

    from moto.dynamodb.models.table import StreamShard

    from flightdeck.local.moto_app import share_stream_records

    share_stream_records()

    class Table:  # as moto's: the shard refers back to its table
        def __init__(self):
            self.stream_shard = StreamShard.__new__(StreamShard)
            self.stream_shard.table, self.stream_shard.items = self, [{"record": 1}, {"record": 2}]

    table = Table()
    saved = copy.deepcopy(table)  # what TransactWriteItems keeps to put back on a failed condition
    table.stream_shard.items.append({"record": 3})  # the transaction's own write
    shard = saved.stream_shard
    assert shard.items == [{"record": 1}, {"record": 2}]  # put back: the transaction's record is gone
    assert shard.items[0] is table.stream_shard.items[0]  # the records themselves are not copied
    assert shard.table is saved  # the copy belongs to the copied table
