#!/usr/bin/env bash
# Builds tidb-server (github.com/pingcap/tidb, release-8.5 line) from the Go module proxy into a cache
# outside the repository, and starts or stops a standalone TiDB (unistore storage) for the tests.
#   scripts/tidb.sh build    -> prints the path of the cached tidb-server (builds it the first time)
#   scripts/tidb.sh start    -> builds if needed, starts TiDB on 127.0.0.1:${LANEWAKE_TIDB_PORT:-4000}, waits until it answers
#   scripts/tidb.sh stop     -> stops the TiDB this script started (by pid)
#
# tidb-server cannot be `go install`ed: its go.mod has replace directives, and its SQL parser is a nested
# module (pkg/parser) that the main module's zip leaves out. So the script downloads both modules at the
# same commit, puts the parser where the replace directive expects it, and builds ./cmd/tidb-server there.
set -euo pipefail

# The module proxy serves TiDB only as pseudo-versions (its v8.5.x tags have no /v8 module path). This
# commit (2025-11-26, go 1.23.6, client-go and kvproto of the release-8.5 branch) is the newest 8.5-line
# commit the proxy serves here; docker-compose.yml pins the matching image.
commit_time="20251126154744"
commit="e4e814fdc0af"
tidb_version="v1.1.0-beta.0.${commit_time}-${commit}"
parser_version="v0.0.0-${commit_time}-${commit}"
label="8.5-${commit}"

cache_root="${LANEWAKE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lanewake}"
dir="$cache_root/tidb/$label"
server="$dir/tidb-server"
port="${LANEWAKE_TIDB_PORT:-4000}"
status_port="${LANEWAKE_TIDB_STATUS_PORT:-10080}"
run_dir="${LANEWAKE_TIDB_RUN_DIR:-${TMPDIR:-/tmp}/lanewake-tidb-$port}"

go_bin() {
  if [[ -n "${GO:-}" ]]; then echo "$GO"; return; fi
  if command -v go >/dev/null 2>&1; then command -v go; return; fi
  if [[ -x /usr/local/go/bin/go ]]; then echo /usr/local/go/bin/go; return; fi
  echo "tidb.sh: Go is needed to build tidb-server (set GO=/path/to/go)" >&2
  exit 1
}

module_dir() { # module@version -> its extracted, read-only directory in the module cache
  local json
  json="$(GOTOOLCHAIN=local GOFLAGS=-mod=mod "$(go_bin)" mod download -json "$1")"
  if grep -q '"Error"' <<<"$json"; then echo "tidb.sh: go mod download $1 failed: $json" >&2; exit 1; fi
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json"
}

build() {
  if [[ -x "$server" ]]; then echo "$server"; return; fi
  local go; go="$(go_bin)"
  mkdir -p "$dir"
  build_tmp="$(mktemp -d "$dir/.build.XXXXXX")"
  trap 'chmod -R u+w "$build_tmp" 2>/dev/null; rm -rf "$build_tmp"' EXIT
  local tmp="$build_tmp"
  local start; start=$(date +%s)
  echo "tidb.sh: building tidb-server $label with $("$go" version) (first run only; several minutes)" >&2
  local src parser
  src="$(module_dir "github.com/pingcap/tidb@$tidb_version")"
  parser="$(module_dir "github.com/pingcap/tidb/pkg/parser@$parser_version")"
  cp -R "$src/." "$tmp/src"
  chmod -R u+w "$tmp/src"
  rm -rf "$tmp/src/pkg/parser"
  cp -R "$parser/." "$tmp/src/pkg/parser"
  chmod -R u+w "$tmp/src/pkg/parser"
  (cd "$tmp/src" && GOTOOLCHAIN=local GOFLAGS="-mod=mod -trimpath" CGO_ENABLED=0 \
    "$go" build -o "$tmp/tidb-server" ./cmd/tidb-server) >&2
  mv "$tmp/tidb-server" "$server"
  echo "tidb.sh: built in $(( $(date +%s) - start )) s, $(du -h "$server" | cut -f1)" >&2
  echo "$server"
}

answers() {
  if command -v mysqladmin >/dev/null 2>&1; then
    mysqladmin -h127.0.0.1 -P"$port" -uroot --connect-timeout=2 ping >/dev/null 2>&1
  else
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
  fi
}

start() {
  if answers; then echo "tidb.sh: a server already answers on 127.0.0.1:$port" >&2; return; fi
  local bin; bin="$(build)"
  mkdir -p "$run_dir"
  rm -rf "$run_dir/data"
  nohup "$bin" -store unistore -path "$run_dir/data" -host 127.0.0.1 -P "$port" -status "$status_port" \
    -log-file "$run_dir/tidb.log" -log-slow-query "$run_dir/tidb-slow.log" >"$run_dir/stdout.log" 2>&1 &
  echo $! >"$run_dir/pid"
  for _ in $(seq 1 120); do
    if answers; then echo "tidb.sh: TiDB answers on 127.0.0.1:$port (pid $(cat "$run_dir/pid"))" >&2; return; fi
    if ! kill -0 "$(cat "$run_dir/pid")" 2>/dev/null; then
      echo "tidb.sh: tidb-server exited; see $run_dir/tidb.log" >&2; tail -20 "$run_dir/stdout.log" >&2; exit 1
    fi
    sleep 1
  done
  echo "tidb.sh: TiDB did not answer within 120 s; see $run_dir/tidb.log" >&2
  exit 1
}

stop() {
  [[ -f "$run_dir/pid" ]] || return 0
  local pid; pid="$(cat "$run_dir/pid")"
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$run_dir/pid"
}

case "${1:-build}" in
  build) build ;;
  start) start ;;
  stop) stop ;;
  *) echo "usage: scripts/tidb.sh build|start|stop" >&2; exit 2 ;;
esac
