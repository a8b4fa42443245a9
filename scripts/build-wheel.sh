#!/usr/bin/env bash
# Builds ferry's wheel: the `ferry` binary (on the venv's PATH once installed) and
# the Python package `ferry` (python/ferry), for any x86_64 Linux with glibc 2.17
# or newer (manylinux2014). Needs only package registries: maturin and ziglang
# come from PyPI into a venv under target/, crates from crates.io; zig links
# against glibc 2.17's symbols, so the build machine's glibc does not matter.
#
#   scripts/build-wheel.sh [--profile release|wheel-test] [--out DIR]
#
# Prints the wheel's path and its platform tag. Exit status 3 when maturin or
# ziglang cannot be installed (the test script skips the wheel tests then).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

profile=release
out=$root/target/wheels
while [ $# -gt 0 ]; do
  case $1 in
    --profile) profile=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--profile release|wheel-test] [--out DIR]" >&2; exit 1 ;;
  esac
done

tools=${FERRY_WHEEL_TOOLS:-$root/target/wheel-tools}
if ! "$tools/bin/maturin" --version >/dev/null 2>&1 || ! "$tools/bin/python" -m ziglang version >/dev/null 2>&1; then
  echo "==> installing maturin and ziglang (PyPI) into $tools" >&2
  if ! { python3 -m venv "$tools" && "$tools/bin/pip" install --quiet --disable-pip-version-check "maturin>=1.5,<2" ziglang; } >&2; then
    echo "could not install maturin and ziglang from PyPI into $tools" >&2
    exit 3
  fi
fi
# maturin runs zig as `python -m ziglang` with the first python on PATH.
export PATH="$tools/bin:$PATH"

mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/ferry-*.whl
start=$(date +%s)
maturin build --profile "$profile" --zig --compatibility manylinux2014 --out "$out" >&2
wheel=$(ls "$out"/ferry-*.whl)
echo "wheel: $wheel"
echo "platform tag: $(basename "$wheel" .whl | cut -d- -f5)"
echo "built in $(($(date +%s) - start)) s (profile $profile)"
