#!/usr/bin/env bash
# Multi-turn benchmark (docs/benchmarks-multiturn.md): conversations whose turns repeat earlier
# outputs, each of our configurations on its OWN server (learned state is shared per server, so a
# configuration must not draft from another's outputs), and, when $LLAMA_SERVER names a llama-server
# binary, one llama-server per speculative type.
# Phase "cold": the servers never saw the conversations. Then every server is stopped with SIGTERM
# (ours save their learned files: --spec-suffix-file, --spec-ngram-mod-file, -lcd in $STATE) and
# started again with the same files; phase "restart" replays the same conversations.
# Usage: bash benchmarks/multiturn.sh [extra benchmarks.bench.multiturn args, e.g. --only file_edits]
#        LLAMA_SERVER=~/llama.cpp/build/bin/llama-server MARKDOWN=docs/benchmarks-multiturn.md \
#          bash benchmarks/multiturn.sh
#        CONFIGS=none,suffix bash benchmarks/multiturn.sh --only file_edits --turns 2 --n-predict 32
set -euo pipefail
LLAMA_ARGS=${LLAMA_ARGS:-}  # extra flags for every llama-server (word-split), e.g. --no-repack on an AMX CPU
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's slotserver, not an installed one
PORT=${PORT:-8300}  # ours from here, one port each; the llama-servers take the ports after them
ROUNDS=${ROUNDS:-1}  # per phase; round 2 on is warm
NGRAM_TYPES=ngram-mod+ngram-simple+ngram-map-k+ngram-map-k4v+ngram-cache
ALL=$NGRAM_TYPES+suffix  # every drafter in one chain
# Ours: no speculation, ngram-mod alone, suffix alone, the whole chain with llama.cpp's precedence
# (suffix drafts only where no n-gram drafter has a draft) and with expected-value selection.
CONFIGS=${CONFIGS:-none,ngram-mod,suffix,$ALL@precedence,$ALL@expected}
LLAMA_SPEC_TYPES=${LLAMA_SPEC_TYPES:-none ngram-mod ngram-simple ngram-map-k ngram-map-k4v}
MARKDOWN=${MARKDOWN:-}  # append the tables here too (they are always printed)
LABEL=${LABEL:-Gemma 3 270M Q4_K_M}
SERVER_ARGS=${SERVER_ARGS:-}  # extra flags for every slotserver (word-split)
STATE=${STATE:-$(mktemp -d /tmp/multiturn.XXXXXX)}  # the learned files, kept for a look afterwards
MODEL=${MODEL:-$(python3 -c "from slotserver.engine.model_files import default_model_path; print(default_model_path())")}
LOGS=${LOGS:-$STATE}

source benchmarks/servers.sh  # start, wait_healthy, stop_servers (SIGTERM: ours save their files)
trap stop_servers EXIT

IFS=, read -ra OURS <<< "$CONFIGS"
SERVERS=()  # --ours/--compare arguments of the bench, the same in both phases
start_servers() {  # start_servers <phase>: one at a time, so each start-up measures or reads the
  local phase=$1 i=0 port=$PORT config types type spec  # verify-cost profile undisturbed
  SERVERS=()
  for config in "${OURS[@]}"; do
    types=${config%@*}
    mkdir -p "$STATE/ours$i"
    # Every file flag is given; a server saves only those of the drafters it has.
    start "$LOGS/ours$i.$phase.log" python3 -m slotserver -m "$MODEL" --port "$port" -np 1 -c 4096 \
      --spec-type "${types//+/,}" --spec-suffix-file "$STATE/ours$i/suffix.bin" \
      --spec-ngram-mod-file "$STATE/ours$i/ngram-mod.bin" -lcd "$STATE/ours$i/ngram-cache.bin" $SERVER_ARGS
    wait_healthy "http://127.0.0.1:$port" "$LOGS/ours$i.$phase.log"
    SERVERS+=(--ours "$config=http://127.0.0.1:$port")
    i=$((i + 1)); port=$((port + 1))
  done
  if [[ -n ${LLAMA_SERVER:-} ]]; then
    for type in $LLAMA_SPEC_TYPES; do
      spec=()
      [[ $type != none ]] && spec=(--spec-type "$type")
      start "$LOGS/llama-server_$type.$phase.log" "$LLAMA_SERVER" -m "$MODEL" --port "$port" -np 1 -c 4096 -t 2 "${spec[@]}" $LLAMA_ARGS
      wait_healthy "http://127.0.0.1:$port" "$LOGS/llama-server_$type.$phase.log"
      SERVERS+=(--compare "llama-server:$type=http://127.0.0.1:$port")
      port=$((port + 1))
    done
  fi
}

run_phase() {  # run_phase <cold|restart> [bench args...]
  local phase=$1; shift
  echo "== $phase: $LABEL, learned files in $STATE"
  python3 -m benchmarks.bench.multiturn "${SERVERS[@]}" --phase "$phase" --rounds "$ROUNDS" \
    --label "$LABEL, $phase" ${MARKDOWN:+--markdown "$MARKDOWN" --append} "$@"
}

start_servers cold
run_phase cold "$@"
stop_servers
echo "== saved:"; ls -l "$STATE"/ours*/ 2> /dev/null | grep -v '^total' || true
start_servers restart
grep -h "loaded the" "$LOGS"/ours*.restart.log || echo "(no server loaded a learned file)"
run_phase restart "$@"
stop_servers
