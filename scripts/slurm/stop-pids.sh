# Sourced by the cluster scripts: stop_pids FILE stops exactly the processes whose
# pids FILE lists (TERM, up to 5 s to exit, then KILL) and removes FILE.
stop_pids() {
  local file=$1 pid alive
  [ -f "$file" ] || return 0
  while read -r pid; do kill "$pid" 2>/dev/null || true; done < "$file"
  for _ in $(seq 50); do
    alive=0
    while read -r pid; do kill -0 "$pid" 2>/dev/null && alive=1; done < "$file"
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  while read -r pid; do kill -9 "$pid" 2>/dev/null || true; done < "$file"
  rm -f "$file"
}
