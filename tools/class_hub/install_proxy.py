"""Install JupyterHub's proxy from npm: `python tools/class_hub/install_proxy.py [DEST]`.

configurable-http-proxy is a Node.js program (npm package), not a Python one. This runs
`npm ci` on the package.json and package-lock.json beside this file (every package pinned by
version and checksum) into DEST (default: <the interpreter's prefix, the venv>/class-hub-proxy),
with npm's cache inside DEST, no install scripts, and prints the executable's path. A second
call with the same lock file only prints the path.

Exits 0 on success, 2 with a message when npm is missing or its registry cannot be reached
(`ProxyUnavailable`: the class-hub test skips then), 1 on any other failure.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = HERE / "npm"
FILES = ("package.json", "package-lock.json")
EXECUTABLE = Path("node_modules") / ".bin" / "configurable-http-proxy"
#: npm's own per-request limits, so that an unreachable registry fails in seconds, not minutes
NPM_NET = ["--fetch-timeout=30000", "--fetch-retries=1"]


class ProxyUnavailable(RuntimeError):
    """npm is not installed or its registry cannot be reached (not a fault of the course)."""


def default_dest() -> Path:
    return Path(sys.prefix) / "class-hub-proxy"


def installed(dest: Path) -> Path | None:
    """The executable in `dest` if it was installed from the current lock file."""
    exe = dest / EXECUTABLE
    same = all((dest / f).is_file() and (dest / f).read_bytes() == (PACKAGE / f).read_bytes()
               for f in FILES)
    return exe if same and exe.is_file() else None


def ensure_proxy(dest: Path | None = None, timeout_s: float = 300) -> Path:
    """configurable-http-proxy installed in `dest` (npm ci once); returns the executable."""
    dest = Path(dest or default_dest()).resolve()
    exe = installed(dest)
    if exe:
        return exe
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise ProxyUnavailable("npm and node are not installed: JupyterHub's proxy "
                               "(configurable-http-proxy) comes from npm")
    staging = dest.with_name(dest.name + ".installing")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(mode=0o700, parents=True)
    for f in FILES:
        shutil.copyfile(PACKAGE / f, staging / f)
    cmd = [npm, "ci", "--prefix", str(staging), "--cache", str(staging / ".npm-cache"),
           "--no-audit", "--no-fund", "--ignore-scripts", "--omit=dev", *NPM_NET]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                           stdin=subprocess.DEVNULL)
        failed = r.returncode != 0
        output = (r.stdout + r.stderr)[-3000:]
    except subprocess.TimeoutExpired:
        failed, output = True, f"npm ci did not finish within {timeout_s:.0f} s"
    if failed:
        reachable = _registry_reachable(npm, staging)
        shutil.rmtree(staging, ignore_errors=True)
        if not reachable:
            raise ProxyUnavailable("the npm registry cannot be reached (`npm ping` failed), so "
                                   f"configurable-http-proxy cannot be installed:\n{output}")
        raise RuntimeError(f"`{' '.join(cmd)}` failed:\n{output}")
    shutil.rmtree(staging / ".npm-cache", ignore_errors=True)     # only needed while installing
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    exe = installed(dest)
    if exe is None:
        raise RuntimeError(f"npm ci succeeded but {dest / EXECUTABLE} is missing")
    return exe


def _registry_reachable(npm: str, staging: Path) -> bool:
    try:
        r = subprocess.run([npm, "ping", "--cache", str(staging / ".npm-cache"), *NPM_NET],
                           capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return False
    return r.returncode == 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest", nargs="?", type=Path, default=None,
                    help=f"install folder (default {default_dest()})")
    args = ap.parse_args(argv)
    try:
        print(ensure_proxy(args.dest))
    except ProxyUnavailable as exc:
        print(exc, file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
