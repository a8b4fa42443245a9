#!/usr/bin/env bash
# Writes the man page and the bash, zsh and fish completions that the wheel installs
# (under the venv's share/, where pip puts a wheel's data files), from the parser of
# the ferry binary built here. Run it after changing a command or flag; the test
# tests/shell.rs fails while the files in python/ferry.data differ from the binary's.
#
#   scripts/shell-files.sh [FERRY_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
ferry=${1:-}
if [ -z "$ferry" ]; then
  cargo build --quiet
  ferry=target/debug/ferry
fi
share=python/ferry.data/data/share
mkdir -p "$share/man/man1" "$share/bash-completion/completions" "$share/zsh/site-functions" \
  "$share/fish/vendor_completions.d"
rm -f "$share"/man/man1/ferry*.1
"$ferry" manpage >"$share/man/man1/ferry.1"
# One page per subcommand, as the main page refers to them (ferry-prepare(1), ...).
for command in $("$ferry" --help | sed -n '/^Commands:/,/^$/p' | awk 'NR > 1 && $1 != "help" { print $1 }'); do
  "$ferry" manpage "$command" >"$share/man/man1/ferry-$command.1"
done
"$ferry" completions bash >"$share/bash-completion/completions/ferry"
"$ferry" completions zsh >"$share/zsh/site-functions/_ferry"
"$ferry" completions fish >"$share/fish/vendor_completions.d/ferry.fish"
echo "wrote $share"
