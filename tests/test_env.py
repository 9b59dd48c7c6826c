"""flashcourse.env: the environment check of notebook 00."""

import numpy as np

from flashcourse import env, gpu


def test_report_has_versions_and_gpu_facts():
    facts = env.report()
    for key in ("python", "platform", *env.PACKAGES, "cuda_gpu", "simulator"):
        assert key in facts, key
    assert facts["numpy"] == np.__version__
    assert facts["flashcourse"] is not None          # installed editable by the set-up
    assert facts["cuda_gpu"] is gpu.driver_has_gpu()
    assert facts["simulator"] is gpu.using_simulator()


def test_report_does_not_import_numba(monkeypatch):
    import sys
    monkeypatch.delitem(sys.modules, "numba", raising=False)
    env.report()
    assert "numba" not in sys.modules


def test_missing_package_is_none_and_advised():
    assert env.package_version("surely-not-a-real-package-name") is None
    facts = dict(env.report(), ipywidgets=None)
    notes = env.advice(facts)
    assert any("Missing packages: ipywidgets" in n for n in notes)
    assert not any("Everything" in n for n in notes)


def _facts(**over):
    base = {"python": "3.11.9", "platform": "Linux x86_64", **{n: "1.0" for n in env.PACKAGES},
            "numpy": "2.4.6", "cuda_gpu": False, "simulator": True}
    return {**base, **over}


def test_advice_for_each_gpu_situation():
    assert any("simulator" in n for n in env.advice(_facts()))
    assert any("GPU is visible" in n for n in env.advice(_facts(cuda_gpu=True, simulator=False)))
    assert any("simulator is on" in n for n in env.advice(_facts(cuda_gpu=True, simulator=True)))
    assert any("simulator is off" in n for n in env.advice(_facts(simulator=False)))
    assert any("Everything" in n for n in env.advice(_facts()))


def test_advice_flags_old_python_and_new_numpy():
    notes = env.advice(_facts(python="3.9.18", numpy="2.5.1"))
    assert any("too old" in n for n in notes)
    assert any("numpy 2.5.1" in n for n in notes)
    assert not any("Everything" in n for n in notes)


def test_show_prints_table(capsys):
    facts = env.show(_facts(numba=None))
    out = capsys.readouterr().out
    assert "numba " in out and "NOT INSTALLED" in out
    assert "cuda_gpu" in out and "no" in out
    assert facts["numba"] is None
