"""Finding the ``ferry`` binary and running it."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig


class FerryError(Exception):
    """The ``ferry`` binary is missing, or a command it ran failed."""


def binary():
    """The path of the ``ferry`` binary this package runs.

    ``FERRY_BINARY`` wins when set. Then the scripts directory of this interpreter
    (where pip put the binary from the same wheel, so the two always match, even
    when the venv is not activated and another ``ferry`` is first on PATH), then
    the user scheme's (``pip install --user``), then PATH.
    """
    explicit = os.environ.get("FERRY_BINARY")
    if explicit:
        return explicit
    name = "ferry.exe" if os.name == "nt" else "ferry"
    for scheme in (None, "{}_user".format(os.name)):
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        candidate = os.path.join(scripts, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if found:
        return found
    raise FerryError(
        "the ferry binary was not found next to {} nor on PATH; install the ferry wheel "
        "into this environment (pip install ferry-*.whl) or set FERRY_BINARY".format(sys.executable)
    )


def run(args):
    """Runs ``ferry ARGS`` and returns its stdout; raises FerryError with its stderr on failure."""
    command = [binary()] + [str(arg) for arg in args]
    try:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    except OSError as err:
        raise FerryError("could not run {}: {}".format(command[0], err)) from err
    if done.returncode != 0:
        message = done.stderr.strip() or "no message"
        raise FerryError("`ferry {}` failed (exit {}): {}".format(" ".join(command[1:]), done.returncode, message))
    return done.stdout


def run_json(args):
    """Runs a ``--json`` command and returns the parsed output."""
    output = run(args)
    try:
        return json.loads(output)
    except ValueError as err:
        raise FerryError("`ferry {}` printed no JSON: {}".format(" ".join(map(str, args)), err)) from err
