#!/usr/bin/env bash
# A/B of two versions of our server in one bench run: this checkout ("new") against the commit $OLD
# ("old", checked out into a temporary git worktree), each configuration on its own server with its
# speculative types fixed at start, so neither learns from the other's requests. The bench
# alternates them per workload (each alone on the machine while it answers) beside our server
# without speculation and the oracle: every ratio shares the machine's load.
# Usage: OLD=d19b8d2 bash benchmarks/ab.sh [extra benchmarks.bench.run args]
#        OLD=HEAD~1 CONFIGS="suffix ngram-mod,suffix@expected" ONLY=repeat,quote ROUNDS=3 bash benchmarks/ab.sh
# CONFIGS: space-separated; each is --spec-type's list, optionally @expected|@precedence (--spec-select).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OLD:?set OLD to the git commit to compare against}"
ROUNDS=${ROUNDS:-2}
ONLY=${ONLY:-}
PORT=${PORT:-8490}
ALL=ngram-mod,ngram-simple,ngram-map-k,ngram-map-k4v,ngram-cache,suffix
CONFIGS=${CONFIGS:-suffix $ALL@expected}
MODEL=${MODEL:-$(python3 -c "from slotserver.engine.model_files import default_model_path; print(default_model_path())")}

source benchmarks/servers.sh  # start, wait_healthy, stop_servers
old_tree=$(mktemp -d)/old
cleanup() { stop_servers; git worktree remove --force "$old_tree" 2> /dev/null || true; }
trap cleanup EXIT
git worktree add --detach "$old_tree" "$OLD" > /dev/null

serve() {  # serve <checkout> <port> <slotserver args...>
  local tree=$1 port=$2; shift 2  # run from the checkout: python -m puts the working directory first on sys.path
  start "/tmp/ab_$port.log" env -C "$tree" PYTHONPATH="$tree" python3 -m slotserver -m "$MODEL" --port "$port" -np 4 -c 8192 "$@"
  wait_healthy "http://127.0.0.1:$port" "/tmp/ab_$port.log"
}

serve "$PWD" "$PORT" --metrics --spec-oracle --spec-type "$ALL"
compares=()
port=$PORT
for config in $CONFIGS; do
  types=${config%@*}
  select=()
  [[ $config == *@* ]] && select=(--spec-select "${config#*@}")
  for side in new old; do
    port=$((port + 1))
    tree=$PWD
    [[ $side == old ]] && tree=$old_tree
    serve "$tree" "$port" --spec-type "$types" "${select[@]}"
    compares+=(--compare "$side:$config=http://127.0.0.1:$port")
  done
done
python3 -m benchmarks.bench.run --url "http://127.0.0.1:$PORT" --types none,oracle "${compares[@]}" \
  --rounds "$ROUNDS" --streams 1 ${ONLY:+--only "$ONLY"} "$@"
