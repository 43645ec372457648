# Sourced by the benchmark scripts (performance.sh, multiturn.sh): start servers in the background,
# wait until they answer, and stop them again. Only the servers started here are ever signalled,
# by their process ids. The sourcing script sets `trap stop_servers EXIT`.

PIDS=()
stop_servers() {  # SIGTERM (slotserver drains, saves its learned files and exits), then wait for each
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2> /dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2> /dev/null || true; done
  PIDS=()
}

start() {  # start <log> <command...>: in the background, its pid kept for stop_servers
  local log=$1; shift
  "$@" > "$log" 2>&1 &
  PIDS+=($!)
}

wait_healthy() {  # wait_healthy <url> <log>: until /health answers 200 (503 while the model loads)
  until curl -sf -o /dev/null "$1/health"; do
    kill -0 "${PIDS[-1]}" 2> /dev/null || { echo "the server for $1 exited; its log: $2" >&2; tail -5 "$2" >&2; return 1; }
    sleep 1
  done
}
