#!/usr/bin/env bash
# Benchmark (not a test): `ferry status` and `ferry gc --dry-run` over a cache of
# 1,000 entries. One entry is prepared for real; 999 copies of it are given their
# own fingerprints, names and last-use times (status and gc read manifests and
# markers only, so copies cost them what real entries would). Best of 5 runs each.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=${BENCH_DIR:-$root/target/bench-status}
count=${BENCH_ENTRIES:-1000}
cargo build --release --quiet
ferry="$root/target/release/ferry"
rm -rf "$work" && mkdir -p "$work"
"$ferry" -q demo --dir "$work/demo" >/dev/null
cache="$work/demo/cache"
python3 - "$cache" "$count" <<'PY'
import hashlib, json, os, shutil, sys, time
cache, count = sys.argv[1], int(sys.argv[2])
entries = os.path.join(cache, "entries")
(first,) = os.listdir(entries)
manifest = json.load(open(os.path.join(entries, first, "manifest.json")))
os.makedirs(os.path.join(cache, "used"), exist_ok=True)
now = time.time()
for i in range(1, count):
    fingerprint = hashlib.blake2b(f"entry {i}".encode(), digest_size=32).hexdigest()
    short = fingerprint[:16]
    target = os.path.join(entries, short)
    shutil.copytree(os.path.join(entries, first), target)
    manifest["fingerprint"] = fingerprint
    manifest["name"] = f"variant-{i % 50}"
    json.dump(manifest, open(os.path.join(target, "manifest.json"), "w"))
    marker = os.path.join(cache, "used", short)
    open(marker, "w").close()
    os.utime(marker, (now - i * 3600, now - i * 3600))
PY
best() { # command... -> best wall seconds of 5
  python3 - "$@" <<'PY'
import subprocess, sys, time
times = []
for _ in range(5):
    started = time.perf_counter()
    subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
    times.append(time.perf_counter() - started)
print(f"{min(times):.3f}")
PY
}
entries=$(ls "$cache/entries" | wc -l)
status_s=$(best "$ferry" status --cache "$cache" --json)
gc_s=$(best "$ferry" gc --cache "$cache" --dry-run --keep 100 --max-age 30d)
echo "cache of $entries entries"
echo "ferry status --json:                 ${status_s} s (target <= 0.5)"
echo "ferry gc --dry-run --keep 100 --max-age 30d: ${gc_s} s (target <= 0.5)"
