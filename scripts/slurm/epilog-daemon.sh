#!/bin/sh
# Example Slurm Epilog to pair with prolog-daemon.sh: cancel any staging still
# running into the finished job's directory (the site epilog then removes it).
TMPDIR_ROOT=${TMPDIR_ROOT:-/localscratch}
dest="$TMPDIR_ROOT/job_$SLURM_JOB_ID/ferry"
ferry request '{"type": "status"}' 2>/dev/null \
  | python3 -c 'import json, sys; [print(s["id"]) for s in json.load(sys.stdin).get("stagings", []) if s["dest"] == sys.argv[1] and s["phase"] == "running"]' "$dest" \
  | while read -r id; do ferry request "{\"type\": \"cancel\", \"id\": $id}" >/dev/null 2>&1; done
exit 0
