"""A transformers older than the package supports is refused by name before anything runs without a cache: by the
cache-using forward (CachedLM) and by the command line, in one line. The installed version is faked."""

from __future__ import annotations

import pytest
import transformers

from playground.cli import main, random_timing
from playground.compat import MIN_TRANSFORMERS, require_transformers
from playground.core.cached import CachedLM
from playground.errors import PlaygroundError
from tests.tiny import tiny_model


@pytest.mark.parametrize("old", ["5.17.0", "5.9.0", "5.24.0.dev0", "4.57.1"])
def test_an_older_transformers_is_refused_by_the_cached_forward_naming_both_versions(monkeypatch, old):
    monkeypatch.setattr(transformers, "__version__", old)  # 5.9.0: older numerically, newer as a string
    with pytest.raises(PlaygroundError) as refused:
        CachedLM(tiny_model(), "cpu")
    assert f"transformers {old} is older than {MIN_TRANSFORMERS}" in str(refused.value)
    assert "without" in str(refused.value) and "cache" in str(refused.value)


@pytest.mark.parametrize("new", ["5.24", "5.24.0", "5.25.0", "5.30.2", "6.0.0"])
def test_the_supported_versions_pass(monkeypatch, new):
    monkeypatch.setattr(transformers, "__version__", new)
    require_transformers()
    lm = CachedLM(tiny_model(), "cpu")
    lm.feed([1, 2, 3])
    assert lm.cache_length() == 3


def test_a_version_that_is_no_version_is_refused_in_words(monkeypatch):
    monkeypatch.setattr(transformers, "__version__", "unknown")
    with pytest.raises(PlaygroundError, match="'unknown', which is not a version number"):
        require_transformers()


def test_the_command_line_refuses_it_in_one_line_before_building_anything(monkeypatch, capsys):
    monkeypatch.setattr(transformers, "__version__", "5.17.0")
    built = []
    monkeypatch.setattr(random_timing, "random_pair", lambda *a, **k: built.append(a))
    code = main(["timing", "--random-weights", "--pair", "llama-3.2-3b", "--device", "cpu", "--layers", "1"])
    err = capsys.readouterr().err
    assert code == 2 and not built
    assert err.count("\n") == 1 and err.startswith("error: transformers 5.17.0 is older than 5.24"), err


def test_a_command_that_runs_no_model_is_not_refused(monkeypatch, capsys):
    monkeypatch.setattr(transformers, "__version__", "5.17.0")
    assert main(["whatif", "--alpha", "0.8", "--c", "0.1"]) == 0
    assert "error" not in capsys.readouterr().err
