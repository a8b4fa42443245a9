#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for FERRY_FUZZ_SECONDS (default 30) each,
# starting from the seeds in fuzz/seeds/<target>/ (copied to a scratch corpus, so
# the repository's seeds never change). Needs the nightly toolchain; installs
# cargo-fuzz when missing. Exits 1 on a crash and names the input that caused it;
# skips with a message where nightly or cargo-fuzz cannot be had.
#
# Built without a sanitizer (-s none) but with debug assertions (overflow checks):
# ferry's parsers are safe Rust, so AddressSanitizer would find little, while it
# doubles the build on a two-core CI machine and slows every execution.
#
#   scripts/fuzz.sh                 every target, 30 s each
#   scripts/fuzz.sh manifest spec   only these
#   scripts/fuzz.sh --build-only    build them, run nothing
#   scripts/fuzz.sh --dev           unoptimized: a fraction of the build time, slower
#                                   runs (the smoke run of scripts/test.sh)
#   FERRY_FUZZ_SECONDS=600 scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
seconds=${FERRY_FUZZ_SECONDS:-30}
say() { printf '==> [%s] %s\n' "$(date +%T)" "$*"; }

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "SKIPPED: no nightly toolchain (rustup toolchain install nightly); the fuzz targets were not run"
  exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  say "installing cargo-fuzz"
  if ! cargo install --quiet --locked cargo-fuzz >/dev/null 2>&1; then
    echo "SKIPPED: cargo-fuzz could not be installed; the fuzz targets were not run"
    exit 0
  fi
fi

build_only=0
build=(-s none --debug-assertions)
while [ $# -gt 0 ]; do
  case $1 in
    --build-only) build_only=1 ;;
    --dev) build=(-s none --dev) ;;
    *) break ;;
  esac
  shift
done
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list)
fi
say "building the fuzz targets"
cargo +nightly fuzz build "${build[@]}" >/dev/null 2>"$root/fuzz/build.log" || {
  cat "$root/fuzz/build.log" >&2
  exit 1
}
[ "$build_only" = 1 ] && exit 0

# The targets write their inputs under the temporary directory: one of this
# run's own, removed at the end, so that runs leave nothing behind in /tmp.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/ferry-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export TMPDIR=$scratch

failed=0
for target in "${targets[@]}"; do
  corpus="$root/fuzz/corpus/$target"
  mkdir -p "$corpus"
  cp -n "$root/fuzz/seeds/$target/"* "$corpus/" 2>/dev/null || true
  log="$root/fuzz/$target.log"
  say "fuzzing $target for ${seconds} s (log in fuzz/$target.log)"
  # -rss_limit_mb: a parser that grows without bound is a finding too. -timeout
  # is for hangs: the parquet crate crawls through some damaged page headers (a
  # 438-byte file took 15 s in the instrumented build) without hanging.
  if cargo +nightly fuzz run "${build[@]}" "$target" "$corpus" -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=60 -print_final_stats=1 >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    say "$target: no crash in ${runs:-?} executions"
  else
    failed=1
    tail -n 30 "$log"
    crash=$(grep -o 'fuzz/artifacts/[^ ]*' "$log" | tail -n 1 || true)
    echo "FUZZ FAILURE: $target crashed${crash:+ on $crash} (reproduce: cargo +nightly fuzz run ${build[*]} $target $crash)" >&2
  fi
done
exit $failed
