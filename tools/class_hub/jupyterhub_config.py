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
  CLASS_HUB_LEARNERS   comma-separated user names (default learner1,learner2,learner3)
  CLASS_HUB_PORT       the proxy's public port, where learners connect (default 8000)
  CLASS_HUB_API_PORT   the proxy's REST API port (default 8001)
  CLASS_HUB_HUB_PORT   the hub's own port, behind the proxy (default 8081)
  CLASS_HUB_PROXY      the configurable-http-proxy executable
                       (default: where `python tools/class_hub/install_proxy.py` puts it,
                       <the venv>/class-hub-proxy/node_modules/.bin/configurable-http-proxy)
"""

import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821  (defined by JupyterHub when it loads this file)

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"

password = os.environ.get("CLASS_HUB_PASSWORD", "")
if len(password) < 8:
    sys.exit("Set CLASS_HUB_PASSWORD to the learners' shared password (8 characters or more).")
state = Path(os.environ.get("CLASS_HUB_DIR", ROOT / ".class_hub")).resolve()
learners = [n.strip() for n in os.environ.get(
    "CLASS_HUB_LEARNERS", "learner1,learner2,learner3").split(",") if n.strip()]
port = int(os.environ.get("CLASS_HUB_PORT", "8000"))
api_port = int(os.environ.get("CLASS_HUB_API_PORT", "8001"))
hub_port = int(os.environ.get("CLASS_HUB_HUB_PORT", "8081"))
proxy = os.environ.get("CLASS_HUB_PROXY") or str(
    Path(sys.prefix) / "class-hub-proxy" / "node_modules" / ".bin" / "configurable-http-proxy")

# Only the hub's user may read the state and the homes (the cookie secret, the database with
# its tokens, the learners' work).
homes = state / "home"
for folder in [state, homes] + [homes / name for name in learners]:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)

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
