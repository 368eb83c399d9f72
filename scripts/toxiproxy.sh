#!/usr/bin/env bash
# Builds Toxiproxy (github.com/Shopify/toxiproxy, a maintained TCP fault proxy) once into a cache outside the
# repository and prints the path of toxiproxy-server. Reuses the cached binary when present.
#   scripts/toxiproxy.sh            -> prints ~/.cache/lanewake/toxiproxy/<version>/toxiproxy-server
#   TOXIPROXY_VERSION=v2.x.y scripts/toxiproxy.sh   to pin another release
set -euo pipefail

# `go list -m -versions github.com/Shopify/toxiproxy/v2` lists only v2.3.0 and v2.5.0 (the proxy's list is
# stale), but later tags resolve; v2.12.0 is the newest release the module proxy serves.
version="${TOXIPROXY_VERSION:-v2.12.0}"
cache_root="${LANEWAKE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lanewake}"
dir="$cache_root/toxiproxy/$version"
server="$dir/toxiproxy-server"

if [[ -x "$server" ]]; then
  echo "$server"
  exit 0
fi

go_bin="${GO:-}"
if [[ -z "$go_bin" ]]; then
  if command -v go >/dev/null 2>&1; then go_bin="$(command -v go)";
  elif [[ -x /usr/local/go/bin/go ]]; then go_bin=/usr/local/go/bin/go;
  else echo "toxiproxy.sh: Go is needed to build toxiproxy-server (set GO=/path/to/go)" >&2; exit 1; fi
fi

mkdir -p "$dir"
tmp="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
echo "toxiproxy.sh: building toxiproxy-server $version with $("$go_bin" version) (first run only)" >&2
GOTOOLCHAIN=local GOBIN="$tmp" GOFLAGS="${GOFLAGS:-} -trimpath" \
  "$go_bin" install "github.com/Shopify/toxiproxy/v2/cmd/server@$version" >&2
# The package is cmd/server, so go install names the binary `server`.
mv "$tmp/server" "$server"
echo "toxiproxy.sh: built in $(( $(date +%s) - start )) s" >&2
echo "$server"
