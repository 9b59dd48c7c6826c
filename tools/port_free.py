"""Exit 0 if 127.0.0.1:PORT is free for a server, else 1 with a message (make lab).

Usage: python tools/port_free.py PORT

JupyterLab would otherwise move to the next free port and print a URL that differs
from the one the learner asked for (the Makefile also passes port_retries=0).
Written for any Python 3: it runs before the venv exists.
"""

import errno
import socket
import sys


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as servers bind
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def main(argv) -> int:
    if len(argv) != 2 or not argv[1].isdigit() or not 0 < int(argv[1]) < 65536:
        print(f"PORT must be a number from 1 to 65535, got {argv[1:]!r}", file=sys.stderr)
        return 2
    port = int(argv[1])
    if port_free(port):
        return 0
    print(f"Port {port} on 127.0.0.1 is already in use (another JupyterLab?). Open that "
          f"one, stop it, or choose another port: make lab PORT={port + 1}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
