"""A small class on one machine: JupyterHub on 127.0.0.1, for trying the course as a class.

    CLASS_HUB_PASSWORD=... jupyterhub -f tools/class_hub/jupyterhub_config.py

(`make class-hub` does this; tests/test_class_hub.py starts the hub with exactly this file.)
Everything listens on 127.0.0.1 only: the proxy (configurable-http-proxy, from npm), its API,
the hub and every learner's server. Learners log in with the shared password
(SharedPasswordAuthenticator); each gets a Jupyter server of their own, with its own home
folder under CLASS_HUB_DIR, started by SimpleLocalProcessSpawner, which needs no system users.
That spawner gives learners no isolation from each other or from the hub's user: it is for
trying the course out, a workshop on a laptop and this repository's tests, never for a class
reachable from a network (use TLJH or Zero to JupyterHub there: README, "For instructors").

Settings, from the environment:
  CLASS_HUB_PASSWORD   the learners' shared password, at least 8 characters (required)
  CLASS_HUB_DIR        the hub's state (database, cookie secret, proxy pid file) and the
                       learners' homes (home/NAME); made mode 0700 (default .class_hub)
  CLASS_HUB_LEARNERS   comma-separated user names (default learner1,learner2,learner3):
                       1 to 32 characters, lower-case letters a-z, digits, '_' and '-',
                       starting with a letter or digit (LEARNER_NAME); each is a folder
                       name, home/NAME, so anything else ('../x', 'a/b') stops the hub
  CLASS_HUB_PORT       the proxy's public port, where learners connect (default 8000)
  CLASS_HUB_API_PORT   the proxy's REST API port (default 8001)
  CLASS_HUB_HUB_PORT   the hub's own port, behind the proxy (default 8081)
  CLASS_HUB_PROXY      the configurable-http-proxy executable
                       (default: where `python tools/class_hub/install_proxy.py` puts it,
                       <the venv>/class-hub-proxy/node_modules/.bin/configurable-http-proxy)
"""

import os
import re
import sys
from pathlib import Path

c = get_config()  # noqa: F821  (defined by JupyterHub when it loads this file)

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"
#: A learner's name: it is their JupyterHub user name and the name of their home folder,
#: home/NAME, so it may hold no '/', '.' or '..' (a unix-user-name-like rule).
LEARNER_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


def port_setting(name: str, default: int) -> int:
    """The port in the environment variable `name`; the hub stops, naming it, if it is
    not a whole number from 1 to 65535."""
    text = os.environ.get(name, str(default)).strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 5 and 1 <= int(text) <= 65535):
        sys.exit(f"{name} must be a port number from 1 to 65535, got {text[:40]!r}.")
    return int(text)


def learner_names(text: str) -> list:
    """The learners of CLASS_HUB_LEARNERS (comma-separated); the hub stops, naming every
    name that does not follow LEARNER_NAME, before any folder is made."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if not LEARNER_NAME.fullmatch(n)]
    if bad:
        shown = ", ".join(repr(n[:40]) for n in bad[:5]) + (" ..." if len(bad) > 5 else "")
        sys.exit(f"CLASS_HUB_LEARNERS: {shown} cannot be a learner's name. A name is 1 to 32 "
                 "characters: lower-case letters a-z, digits 0-9, '_' and '-', starting with "
                 "a letter or a digit (each learner's home is the folder home/NAME).")
    if not names:
        sys.exit("CLASS_HUB_LEARNERS names no learner: give comma-separated names, "
                 "e.g. learner1,learner2,learner3.")
    return names


def check_folder(folder: Path, parent: Path) -> Path:
    """`folder`, which must be missing or a folder directly inside `parent`; the hub stops,
    naming it, if it is anything else there (a file, or a symbolic link, which would make
    the hub open up, with chmod, a folder elsewhere)."""
    if folder.is_symlink() or folder.resolve().parent != parent.resolve() or (
            folder.exists() and not folder.is_dir()):
        sys.exit(f"{folder} must be a folder inside {parent}, not a symbolic link or a file: "
                 "remove it, or choose another CLASS_HUB_DIR.")
    return folder


def make_private(folder: Path) -> None:
    folder.mkdir(mode=0o700, exist_ok=True)
    folder.chmod(0o700)


password = os.environ.get("CLASS_HUB_PASSWORD", "")
if len(password) < 8:
    sys.exit("Set CLASS_HUB_PASSWORD to the learners' shared password (8 characters or more).")
state = Path(os.environ.get("CLASS_HUB_DIR", ROOT / ".class_hub")).resolve()
learners = learner_names(os.environ.get("CLASS_HUB_LEARNERS", "learner1,learner2,learner3"))
port = port_setting("CLASS_HUB_PORT", 8000)
api_port = port_setting("CLASS_HUB_API_PORT", 8001)
hub_port = port_setting("CLASS_HUB_HUB_PORT", 8081)
proxy = os.environ.get("CLASS_HUB_PROXY") or str(
    Path(sys.prefix) / "class-hub-proxy" / "node_modules" / ".bin" / "configurable-http-proxy")

# Only the hub's user may read the state and the homes (the cookie secret, the database with
# its tokens, the learners' work). Each home is checked to be a folder inside home/ before
# any is made: a link planted there must not send the chmod elsewhere.
state.mkdir(mode=0o700, parents=True, exist_ok=True)
state.chmod(0o700)
homes = check_folder(state / "home", state)
make_private(homes)
for home in [check_folder(homes / name, homes) for name in learners]:
    make_private(home)

# --- network: loopback only ---------------------------------------------------------
c.JupyterHub.bind_url = f"http://{LOOPBACK}:{port}"
c.JupyterHub.hub_bind_url = f"http://{LOOPBACK}:{hub_port}"
c.ConfigurableHTTPProxy.api_url = f"http://{LOOPBACK}:{api_port}"
c.ConfigurableHTTPProxy.command = [proxy]
c.ConfigurableHTTPProxy.pid_file = str(state / "jupyterhub-proxy.pid")
c.Spawner.ip = LOOPBACK

# --- state ---------------------------------------------------------------------------
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(state / "jupyterhub.pid")
# stopping the hub stops the proxy it started and every learner's server
c.JupyterHub.cleanup_servers = True
c.JupyterHub.cleanup_proxy = True

# --- who may log in --------------------------------------------------------------------
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = password
c.Authenticator.allowed_users = set(learners)

# --- the learners' servers ---------------------------------------------------------------
c.JupyterHub.spawner_class = "jupyterhub.spawner.SimpleLocalProcessSpawner"
c.SimpleLocalProcessSpawner.home_dir_template = str(homes / "{username}")
# the single-user server of the interpreter that runs the hub (the course's environment)
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
c.Spawner.args = ["--allow-root"] if os.geteuid() == 0 else []
# learners open the course through an nbgitpuller link (README), which pulls it into
# ~/flashcourse and opens its start page; a plain login opens JupyterLab
c.Spawner.default_url = "/lab"
# a learner's own ~/.jupyter config may not switch off the hub's authentication
c.Spawner.disable_user_config = True
# three servers starting at once on a 2-core machine take longer than the 30 s default
c.Spawner.http_timeout = 120
c.Spawner.start_timeout = 180
