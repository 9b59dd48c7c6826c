"""The class hub's configuration, read in-process (no JupyterHub started; issue 50, item 8).

tools/class_hub/jupyterhub_config.py is a Python file JupyterHub executes with
`get_config` defined; here it runs the same way (runpy, a traitlets Config), with the
settings in the environment. A learner's name becomes a folder, home/NAME, made with mode
0700: '../../victim' made and chmodded a folder outside the class's. Now a name must be
1 to 32 of a-z, 0-9, '_', '-' (starting with a letter or digit), every home must be a
real folder inside home/ (a planted link is refused), and a bad setting stops the
configuration with one line, before any folder is made.
"""

import os
import runpy
import stat

import pytest
from helpers import TOOLS

CONFIG = TOOLS / "class_hub" / "jupyterhub_config.py"


def load(monkeypatch, state, **env):
    """Run the configuration file as JupyterHub does; its Config object."""
    from traitlets.config import Config

    for key in [k for k in os.environ if k.startswith("CLASS_HUB_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("CLASS_HUB_PASSWORD", "a long shared password")
    monkeypatch.setenv("CLASS_HUB_DIR", str(state))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = Config()
    runpy.run_path(str(CONFIG), init_globals={"get_config": lambda: config})
    return config


def refused(monkeypatch, state, **env) -> str:
    with pytest.raises(SystemExit) as info:
        load(monkeypatch, state, **env)
    message = info.value.code
    assert isinstance(message, str) and "\n" not in message and "Traceback" not in message
    return message


def test_good_names_get_private_homes(tmp_path, monkeypatch):
    state = tmp_path / "class"
    config = load(monkeypatch, state, CLASS_HUB_LEARNERS=" ada, grace-h ,alan_t,7of9,, ")
    assert config.Authenticator.allowed_users == {"ada", "grace-h", "alan_t", "7of9"}
    assert sorted(p.name for p in (state / "home").iterdir()) == [
        "7of9", "ada", "alan_t", "grace-h"]
    for folder in [state, state / "home", *(state / "home").iterdir()]:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert config.SimpleLocalProcessSpawner.home_dir_template == str(
        state / "home" / "{username}")


@pytest.mark.parametrize("name", [
    "../../victim", "..", ".", "a/b", "/etc", "~root", "Ada", "-ada", "_ada", "ada bob",
    "ada\nbob", "é", "x" * 33, "ada.b", "ada;rm",
])
def test_a_name_that_is_no_plain_folder_name_stops_the_hub_before_any_folder(
        tmp_path, monkeypatch, name):
    """'../../victim' made (and chmodded 0700) a folder two levels above home/."""
    state = tmp_path / "deep" / "class"
    victim = tmp_path / "victim"
    message = refused(monkeypatch, state, CLASS_HUB_LEARNERS=f"ada,{name}")
    assert message.startswith(f"CLASS_HUB_LEARNERS: {name[:40]!r} cannot be a learner's name.")
    assert ("A name is 1 to 32 characters: lower-case letters a-z, digits 0-9, '_' and '-', "
            "starting with a letter or a digit") in message
    assert not state.exists() and not victim.exists()          # nothing was made


def test_every_bad_name_is_named_once(tmp_path, monkeypatch):
    message = refused(monkeypatch, tmp_path / "class", CLASS_HUB_LEARNERS="ok,../a,B,ok2")
    assert message.startswith("CLASS_HUB_LEARNERS: '../a', 'B' cannot be")


def test_no_learner_at_all_is_refused(tmp_path, monkeypatch):
    assert refused(monkeypatch, tmp_path / "class", CLASS_HUB_LEARNERS=" , ,").startswith(
        "CLASS_HUB_LEARNERS names no learner")


def test_a_home_planted_as_a_link_is_refused_and_its_target_untouched(tmp_path, monkeypatch):
    state = tmp_path / "class"
    (state / "home").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    elsewhere.chmod(0o755)
    (state / "home" / "grace").symlink_to(elsewhere)
    message = refused(monkeypatch, state, CLASS_HUB_LEARNERS="ada,grace")
    assert message.startswith(f"{state / 'home' / 'grace'} must be a folder inside "
                              f"{state / 'home'}, not a symbolic link or a file")
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o755          # not chmodded
    assert not (state / "home" / "ada").exists()                   # checked before any made


def test_home_itself_as_a_link_or_a_home_as_a_file_is_refused(tmp_path, monkeypatch):
    state = tmp_path / "class"
    state.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (state / "home").symlink_to(elsewhere)
    assert "home must be a folder inside" in refused(monkeypatch, state)
    assert list(elsewhere.iterdir()) == []
    (state / "home").unlink()
    (state / "home").mkdir()
    (state / "home" / "ada").write_text("not a folder")
    assert "ada must be a folder inside" in refused(monkeypatch, state,
                                                     CLASS_HUB_LEARNERS="ada")


@pytest.mark.parametrize("value", ["x", "0", "65536", "80.5", "-1", "9" * 5000, ""])
def test_a_port_that_is_no_port_number_is_named(tmp_path, monkeypatch, value):
    """int('x') raised a ValueError traceback out of the configuration."""
    message = refused(monkeypatch, tmp_path / "class", CLASS_HUB_API_PORT=value)
    assert message.startswith("CLASS_HUB_API_PORT must be a port number from 1 to 65535, got ")
    assert len(message) < 200
