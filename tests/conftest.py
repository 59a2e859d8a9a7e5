import collections
import json
import os

import pytest

# Never reach for real AWS from tests.
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "FlightdeckTest")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")

# Hypothesis' per-example deadline (200 ms) is a wall-clock bound: on a busy machine a plain example overruns it
# and the test fails for the machine, not the code (issue 36). Properties here are judged by their answers only.
from hypothesis import settings as hypothesis_settings  # noqa: E402

hypothesis_settings.register_profile("flightdeck", deadline=None)
hypothesis_settings.load_profile("flightdeck")

# Every Invoke a botocore client makes in this process is recorded, for the tests to run (tests.support.invokes).
from tests.support.invokes import RECORDER  # noqa: E402

RECORDER.install()
# Committed steps of the in-process functions, for the crash-point explorer (tests.support.explorer.steps).
from tests.support.explorer.steps import WATCH as STEP_WATCH  # noqa: E402

STEP_WATCH.install()
# In-process moto answers one request at a time, as the loopback moto server does (tests.support.atomic_moto).
from tests.support import atomic_moto, bench_run  # noqa: E402

atomic_moto.install()
# moto's Lambda without Docker: an asynchronous invoke is answered 202 and runs nothing (the tests run it).
MOTO_CONFIG = {"lambda": {"use_docker": False}}


@pytest.fixture
def aws():
    from moto import mock_aws

    RECORDER.clear()
    with mock_aws(config=MOTO_CONFIG):
        yield
    RECORDER.clear()


@pytest.fixture
def orchestrator(aws, monkeypatch):
    from tests.support.harness import make_agent

    agent = make_agent(monkeypatch)
    yield agent
    from flightdeck import wiring

    wiring.reset()


@pytest.fixture(scope="session")
def moto_server():
    """A real moto server on loopback: for tests that send truly concurrent requests."""
    from flightdeck.local.moto_app import MotoServerThread

    server = MotoServerThread().start()
    yield server.endpoint
    server.stop()


@pytest.fixture
def orchestrator_on_server(moto_server, monkeypatch):
    """Like `orchestrator`, but every AWS call goes over HTTP to the moto server."""
    import uuid

    import requests

    from flightdeck import wiring
    from tests.support.harness import make_agent

    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    requests.post(f"{moto_server}/moto-api/config", json=MOTO_CONFIG, timeout=10).raise_for_status()
    RECORDER.clear()
    # A fresh name per test: the server's state lives as long as the session.
    agent = make_agent(monkeypatch, name=f"orch-{uuid.uuid4().hex[:8]}")
    yield agent
    wiring.reset()


def pytest_collection_modifyitems(items):
    # schemathesis (4.32 on pytest 9) gives every API operation's item its test function's nodeid
    # (pytest 9 builds a Function's id from its original name and callspec, and schemathesis passes
    # neither the operation), and pytest-xdist runs one item per nodeid: `./dev.sh test` (-n 2) fuzzed
    # one operation of twelve. The operation's label, as the id's params, makes each id unique.
    for item in items:
        label = getattr(item, "operation_label", None)
        if not label or "[" in item.nodeid:
            continue
        node_id = getattr(item, "_id", None)
        if hasattr(node_id, "with_params"):
            item._id = node_id.with_params(label)  # pytest >= 9: a structured NodeId
        else:
            item._nodeid = f"{item.nodeid}[{label}]"
    # Any other shared id would be run once under xdist too: refuse to run rather than skip tests silently.
    ids = collections.Counter(item.nodeid for item in items)
    shared = sorted(nodeid for nodeid, n in ids.items() if n > 1)
    if shared:
        raise pytest.UsageError(f"test ids shared by several tests (pytest-xdist would run one): {shared[:5]}")
    longest_first(items)


# The modules that take longest (--durations, on the 2-core CI machine), longest first. `./dev.sh test` runs
# a worker per core and one more, --dist loadfile: a worker takes the next module when it is nearly done with
# its own, in the order of the collection. Started first, these do not leave one worker running a long module at the end
# while the other has finished (xdist's own order, most tests first, started the bench's 100-150 s
# module, a single test of 30-40 s or two CDK modules late). The other modules follow, most tests first.
LONGEST_FIRST = (
    "integration/test_two_agents.py",
    "integration/test_crash_points.py",
    "integration/test_mcp_server.py",
    "integration/test_chat_client.py",
    "browser/test_console.py",
    "integration/test_a2a_client.py",
    "integration/test_pipeline_workers.py",
    "integration/test_local_demo_run.py",
    "integration/test_a2a_server.py",
    "infra/test_infra_asset.py",
    "integration/test_local_stack.py",
    "infra/test_infra_app.py",
    "integration/test_turn_state_machine.py",
    "integration/test_fuzz_api.py",
    "integration/test_api_callbacks.py",
    "integration/test_crash_points_a2a.py",
    "integration/test_crash_points_doors.py",
    "integration/test_a2a_chat_resume.py",
    "integration/test_skills_api.py",
    "integration/test_peers_admin.py",
    "e2e/test_e2e_deploy.py",
    "integration/test_input_required.py",
    "integration/test_peer_auth.py",
    "integration/test_a2a_interop.py",
    "integration/test_local_runtime.py",
    "integration/test_skills_a2a.py",
    "integration/test_streaming_local_stack.py",
    "integration/test_stream_resumption.py",
    "integration/test_live_relay.py",
    "integration/test_usage_plans_local.py",
    "integration/test_a2a_streaming.py",
    "e2e/test_e2e_faults.py",
    "contract/test_state_differential.py",
)


# Last: the bench runs in the background from the collection on (tests.support.bench_run); its module
# reads what it wrote.
RUN_LAST = ("integration/test_bench_quick.py",)


def longest_first(items: list[pytest.Item]) -> None:
    """Reorders whole modules (a module's own tests keep their order): LONGEST_FIRST, then most tests
    first, then RUN_LAST."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    rank.update({name: len(LONGEST_FIRST) + 1 + i for i, name in enumerate(RUN_LAST)})

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0].removeprefix("tests/")

    sizes = collections.Counter(module(item) for item in items)
    position = {id(item): i for i, item in enumerate(items)}
    items.sort(
        key=lambda item: (
            rank.get(module(item), len(LONGEST_FIRST)),
            -sizes[module(item)],
            module(item),
            position[id(item)],
        )
    )


def pytest_collection_finish(session):
    if not session.config.option.collectonly:
        bench_run.start(session)  # the quick bench, in the background (tests.support.bench_run)


def pytest_sessionfinish(session, exitstatus):
    bench_run.stop(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)


def pytest_configure(config):
    # Keep the collection's order (longest_first above): xdist would otherwise sort modules by their number of tests.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_terminal_summary(terminalreporter):
    # The crash-point explorer's figures (tests/integration/test_crash_points.py): each of its tests records
    # them as a user property, which pytest-xdist brings back to this process with the test's report.
    runs = [
        json.loads(value)
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", "call") == "call"
        for key, value in getattr(report, "user_properties", ())
        if key == "crash_explorer"
    ]
    if runs:
        terminalreporter.write_line(
            f"crash-point explorer: {len(runs)} scenarios x {sum(r['runs'] for r in runs)} crash points "
            f"(one uncrashed run each included) x {runs[0]['invariants']} invariants checked, "
            f"in {sum(r['seconds'] for r in runs):.1f} s of test time"
        )
