#!/usr/bin/env bash
# One entry point for a fresh machine that has Python 3.11+:
#   ./dev.sh demo [--config FILE] [--scenario parallel|delegate|timeout|ask|skills|tools] [--message TEXT]
#                                                          the demo (two agents by default), locally, no AWS account
#   ./dev.sh up [--config FILE] [--json-logs] [--log-dir DIR]   every agent of a config on loopback
#   ./dev.sh test [pytest args]                            all the tests
#   ./dev.sh check                                         static checks: ruff lint, ruff format --check, mypy
#   ./dev.sh setup                                         only the venv with the test dependencies (what test and check use)
#   ./dev.sh bench [--quick] [--json PATH] [--config FILE] what a delegation costs (docs/PERFORMANCE.md)
# It creates .venv and installs what the command needs on first use.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=.venv

ensure() {  # ensure EXTRA: install the project with that extra unless already done for this pyproject
  local extra=$1 stamp="$VENV/.installed-$1"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "dev.sh: first run of '$extra': setting up $VENV (about 90 s; later runs start at once)" >&2
    local a2a1="" a2a1_log
    a2a1_log=$(mktemp)
    if [ "$extra" = dev ]; then  # the tests' a2a-sdk 1.x venv (tests/support/a2a1.py), made alongside, not mid-test
      "$PYTHON" -m tests.support.a2a1 >"$a2a1_log" 2>&1 &
      a2a1=$!
    fi
    [ -x "$VENV/bin/python" ] || { echo "dev.sh: [1/3] creating $VENV" >&2; "$PYTHON" -m venv "$VENV"; }
    echo "dev.sh: [2/3] upgrading pip" >&2
    "$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
    echo "dev.sh: [3/3] installing flightdeck and its '$extra' dependencies:" >&2
    # What pip is about to fetch, from pyproject.toml: the runtime's and the extra's own (their dependencies follow).
    "$VENV/bin/python" - "$extra" >&2 <<'PY' || true
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
wanted, seen = [sys.argv[1]], set()
names = list(project["dependencies"])
while wanted:
    extra = wanted.pop()
    for requirement in extras.get(extra, []):
        if requirement.startswith("flightdeck-serverless["):
            wanted += [e for e in requirement.split("[", 1)[1].rstrip("]").split(",") if e not in seen]
        else:
            names.append(requirement)
    seen.add(extra)
short = sorted({n.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0] for n in names})
print("dev.sh:       " + ", ".join(short) + " (pip prints nothing until it is done; a busy machine takes minutes)")
PY
    "$VENV/bin/python" -m pip install --quiet -e ".[$extra]" >&2
    if [ -n "$a2a1" ] && ! wait "$a2a1"; then
      cat "$a2a1_log" >&2
      echo "dev.sh: .venv-a2a1 (a2a-sdk 1.x) not made; the tests that need it try again" >&2
    fi
    rm -f "$a2a1_log"
    touch "$stamp"
    echo "dev.sh: $VENV ready" >&2
  fi
}

cmd=${1:-help}
[ $# -gt 0 ] && shift
case "$cmd" in
  demo) ensure local; exec "$VENV/bin/flightdeck" local demo "$@" ;;
  up)   ensure local; exec "$VENV/bin/flightdeck" local up "$@" ;;
  test) ensure dev
        # A worker per core and one more: about half the suite's time is spent waiting (agents on loopback,
        # timers, subprocesses), which the extra worker fills (on 2 cores, -n 3 ran the longest modules in 4/5 of the time).
        workers=$("$VENV/bin/python" -c 'import os; f = getattr(os, "sched_getaffinity", None); print((len(f(0)) if f else os.cpu_count() or 1) + 1)')
        exec "$VENV/bin/python" -m pytest -n "$workers" --dist loadfile "$@" ;;
  check) ensure dev
         "$VENV/bin/ruff" check functions infra tests app.py
         "$VENV/bin/ruff" format --check functions infra tests app.py
         exec "$VENV/bin/mypy" ;;
  bench) ensure local; exec "$VENV/bin/flightdeck" bench "$@" ;;
  setup) ensure dev ;;
  *)    sed -n '2,9p' "$0"; exit 2 ;;
esac
