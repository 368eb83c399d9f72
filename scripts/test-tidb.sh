#!/usr/bin/env bash
# npm run test:tidb: the suites against a real TiDB (standalone, unistore), built from the Go module
# proxy into ~/.cache/lanewake the first time (scripts/tidb.sh). First every suite in TiDB's default
# pessimistic mode, then the ledger suites, the handler shapes' suites (test/shape-*) and the fleet cap's again with the
# ledger's sessions in optimistic mode.
#   npm run test:tidb                        both runs
#   npm run test:tidb -- test/ledger-lanes.test.ts   only these files, in both modes
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

port="${LANEWAKE_TIDB_PORT:-4000}"
started=0
if ! mysqladmin -h127.0.0.1 -P"$port" -uroot --connect-timeout=2 ping >/dev/null 2>&1; then
  scripts/tidb.sh start
  started=1
fi
stop() { if [[ $started == 1 ]]; then scripts/tidb.sh stop; fi; }
trap stop EXIT

export LANEWAKE_TEST_MYSQL_URL="mysql://root@127.0.0.1:$port"
echo "test:tidb: every suite, pessimistic mode"
if [[ $# -gt 0 ]]; then
  npx vitest run "$@"
else
  # The docs' examples and the packed package's types are checked once, by npm test on MariaDB: neither
  # says more on TiDB, where each example would spend minutes making its own database.
  npx vitest run --exclude test/doc-examples.test.ts --exclude test/package-types.test.ts
fi
echo "test:tidb: the ledger suites, optimistic mode"
if [[ $# -gt 0 ]]; then
  LANEWAKE_TEST_TIDB_TXN_MODE=optimistic npx vitest run "$@"
else
  LANEWAKE_TEST_TIDB_TXN_MODE=optimistic npx vitest run test/ledger- test/conformance/ test/shape- test/fleet-cap test/explain test/rate-limit test/concurrency-keys test/pause test/schedules test/stale-only test/ownership-fence test/stage-history test/workflows test/queue-live-settings
fi
