"""Bad input, limits and exposure: each row of the bad-input table gives a clear PlaygroundError message in the
library, the command line (exit code 2, `error: ...`, no traceback) and the browser app's handlers (the UI's
status line and the API's error carry the same message); limits come from the environment; the app binds
loopback by default; no secret (HF_TOKEN) reaches the UI, logs, exported JSON or error messages.

All on tiny random models with a word-level tokenizer (no chat template, so prompts are encoded raw); the
command line's model loading is replaced by that pair. The same rows through the launched app's API are in
tests/test_load.py."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import pytest
import torch

import playground.inputs.presets
import playground.pairs.registry
from playground.cli import main
from playground.drafters.proposers import lookup
from playground.envinfo import environment, recorded_variables, redact
from playground.errors import PlaygroundError
from playground.inputs.presets import check_output, get_preset, load_preset, load_presets
from playground.inputs.text import check_prompt_text, read_prompt_file
from playground.limits import Limits
from playground.pairs.loading import check_vocab
from playground.pairs.models import ModelPair
from playground.pairs.registry import PairChoice
from playground.ui import handlers, measure, run_panel, serving
from playground.ui.session import Session, parse_request, parse_sweep
from tests.tiny import perturbed, tiny_model, word_tokenizer

WORDS = [f"w{i}" for i in range(63)]  # + "<eos>" = 64 tokens
PROMPT = "w1 w2 w3 w4 w5 w1 w2 w3"
SECRET = "hf_playgroundTestSecret0123456789"


@pytest.fixture(scope="module")
def word_pair():
    target = tiny_model(vocab=64, seed=0, dtype=torch.float32, max_positions=256)
    return ModelPair(target=target, tokenizer=word_tokenizer(WORDS), draft=perturbed(target, noise=0.015),
                     eos_ids=frozenset({63}), target_name="tiny-target", draft_name="tiny-draft")


@pytest.fixture
def cli_pair(monkeypatch, word_pair):
    """The command line loads the tiny pair instead of a real one; records what it was asked for."""
    asked = []

    def fake_load(target, draft, device="auto", dtype="auto", progress=None, **kwargs):
        asked.append((target, draft))
        return word_pair

    monkeypatch.setattr(playground.pairs.registry, "load_pair", fake_load)
    return asked


@pytest.fixture
def provider(word_pair):
    return serving.PairProvider(pair=word_pair)


UI_DEFAULTS = dict(prompt=PROMPT, preset="", chat=True, drafter="draft", k=3, decoding="greedy", temperature=1.0,
                   top_k=0, top_p=1.0, max_new_tokens=8, seed=0)


def ui_request(provider, **changes):
    """The request the app builds from the controls before an event (blocks.py), on the provider's drafters."""
    return parse_request({**UI_DEFAULTS, **changes}, provider.drafter_names())


def ui_run(provider, **changes):
    """The run event's handler to the end (what /run and the Run button call): the request, then the run."""
    return list(run_panel.stream_run(provider, None, ui_request(provider, **changes)))


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(["generate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def cli_error(capsys, *argv) -> str:
    code, _, err = cli(capsys, *argv)
    assert code == 2, err
    assert err.strip().splitlines()[-1].startswith("error: ") and "Traceback" not in err  # after any progress lines
    return err


# --- the table: the same bad input through the UI handlers and the command line ----------------------------

LONG = " ".join(["w7"] * 250)  # 250 tokens: with 8 new tokens more than the tiny target's 256 positions
ROWS = [
    # (row, UI changes, CLI arguments, the message both show)
    ("empty prompt", dict(prompt=""), ["--prompt", ""], "the prompt is empty"),
    ("whitespace prompt", dict(prompt=" \n\t "), ["--prompt", " \n\t "], "the prompt is empty"),
    ("prompt over the context", dict(prompt=LONG), ["--prompt", LONG, "--max-new-tokens", "8"],
     "the prompt is 250 tokens and 8 new tokens were asked for, but the target's context holds 256"),
    ("max new tokens 0", dict(max_new_tokens=0), ["--prompt", PROMPT, "--max-new-tokens", "0"],
     "max new tokens must be from 1 to 2048, got 0"),
    ("max new tokens negative", dict(max_new_tokens=-5), ["--prompt", PROMPT, "--max-new-tokens", "-5"],
     "max new tokens must be from 1 to 2048, got -5"),
    ("max new tokens over the cap", dict(max_new_tokens=2049), ["--prompt", PROMPT, "--max-new-tokens", "2049"],
     "max new tokens must be from 1 to 2048, got 2049"),
    ("k 0", dict(k=0), ["--prompt", PROMPT, "--k", "0"], "k must be"),
    ("k 17", dict(k=17), ["--prompt", PROMPT, "--k", "17"], "k must be"),
    ("k not an integer", dict(k=2.5), ["--prompt", PROMPT, "--k", "2.5"], "k must be"),
    ("k not a number", dict(k="four"), ["--prompt", PROMPT, "--k", "four"], "k must be"),
    ("temperature 0", dict(decoding="sample", temperature=0), ["--prompt", PROMPT, "--sample", "--temperature", "0"],
     "temperature must be a finite number > 0"),
    ("temperature NaN", dict(decoding="sample", temperature=math.nan),
     ["--prompt", PROMPT, "--sample", "--temperature", "nan"], "temperature must be a finite number"),
    ("top-k negative", dict(decoding="sample", top_k=-1), ["--prompt", PROMPT, "--sample", "--top-k", "-1"],
     "top-k must be an integer >= 0"),
    ("top-p 0", dict(decoding="sample", top_p=0), ["--prompt", PROMPT, "--sample", "--top-p", "0"],
     "top-p must be in (0, 1]"),
    ("top-p over 1", dict(decoding="sample", top_p=1.5), ["--prompt", PROMPT, "--sample", "--top-p", "1.5"],
     "top-p must be in (0, 1]"),
    ("seed negative", dict(seed=-1), ["--prompt", PROMPT, "--seed", "-1"], "seed must be between 0"),
    ("unknown preset", dict(preset="no-such-preset"), ["--preset", "no-such-preset"],
     "unknown preset 'no-such-preset'"),
    ("lone surrogate", dict(prompt="w1 \udcff w2"), ["--prompt", "w1 \udcff w2"],
     "the prompt is not valid UTF-8 text: the byte 0xff at character 3"),
    ("NUL character", dict(prompt="w1\x00w2"), ["--prompt", "w1\x00w2"],
     "the prompt contains a control character (U+0000) at character 2"),
    ("escape sequence", dict(prompt="w1 \x1b[31mw2"), ["--prompt", "w1 \x1b[31mw2"],
     "control character (U+001B) at character 3"),
    ("C1 control", dict(prompt="w1 \x85"), ["--prompt", "w1 \x85"], "control character (U+0085)"),
]


@pytest.mark.parametrize("row, ui_changes, argv, message", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_is_a_clear_error_in_the_ui_and_the_cli(capsys, cli_pair, provider, row, ui_changes, argv,
                                                         message):
    with pytest.raises(PlaygroundError) as e:
        ui_run(provider, **ui_changes)
    assert message in str(e.value)
    assert message in cli_error(capsys, *argv)
    # still serving: the next good request runs
    assert ui_run(provider)[-1].status.startswith("Done: 8 new tokens")


def test_the_ui_keeps_the_prompt_and_shows_the_message_on_the_status_line(provider):
    """A bad request leaves the prompt box alone (it is not an output of /run) and says why on the status line."""
    import inspect

    import gradio as gr

    from playground.ui import build_ui

    run = next(fn for fn in build_ui(provider).fns.values() if fn.api_name == "run")
    assert "prompt" not in [getattr(b, "elem_id", None) for b in run.outputs]
    assert "prompt" in [getattr(b, "elem_id", None) for b in run.inputs]

    # the app's own /run function, called as Gradio calls it: the session, the controls in order, the progress
    names = [p for p in inspect.signature(run.fn).parameters if p not in ("session", "progress")]
    values = {**UI_DEFAULTS, "prompt": "w1\x00", "k_mode": "fixed", "min_confidence": 0.0, "moved": {},
              "constrain": False}
    got = []
    with pytest.raises(gr.Error) as e:
        for x in run.fn(None, *(values[name] for name in names), None):
            got.append(x)  # noqa: PERF402 - one by one, so what came before the error is kept
    assert got[-1][0].startswith("\u26a0 the prompt contains a control character (U+0000)")
    assert "control character" in e.value.message


def test_a_seed_that_is_not_an_integer(capsys, provider):
    for seed in ("seven", 1.5, None):
        with pytest.raises(PlaygroundError, match="seed must be a whole number"):
            ui_run(provider, seed=seed)
    with pytest.raises(SystemExit) as e:  # argparse refuses it before anything runs
        main(["generate", "--prompt", PROMPT, "--seed", "seven"])
    assert e.value.code == 2 and "argument --seed: invalid int value: 'seven'" in capsys.readouterr().err


def test_control_characters_are_rejected_not_stripped_and_tabs_and_newlines_are_fine():
    text = "a\tb\r\nc \u200b d \u00e9 \U0001f642"  # tab, CRLF, a zero-width space (format, not control), emoji
    assert check_prompt_text(text) is text
    for bad in ("\x07", "\x0b", "\x0c", "\x7f", "\x9f"):
        with pytest.raises(PlaygroundError, match=f"U\\+{ord(bad):04X}"):
            check_prompt_text("ok " + bad)
    with pytest.raises(PlaygroundError, match="lone surrogate U\\+D800"):
        check_prompt_text("a\ud800")


def test_a_prompt_file_must_be_utf8_and_bounded(tmp_path, capsys, cli_pair):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\u00e9".encode("latin-1"))
    err = cli_error(capsys, "--prompt-file", str(bad))
    assert "is not UTF-8 text: the byte 0xe9 at offset 3" in err
    with pytest.raises(PlaygroundError, match="longer than 10 characters"):
        read_prompt_file("/dev/zero", max_chars=10)  # endless: refused after 41 bytes, never read to the end
    with pytest.raises(PlaygroundError, match="cannot read the prompt file"):
        read_prompt_file(str(tmp_path / "missing.txt"), max_chars=10)
    good = tmp_path / "prompt.txt"
    good.write_text(PROMPT, encoding="utf-8")
    code, out, err = cli(capsys, "--prompt-file", str(good), "--max-new-tokens", "5", "--json")
    assert code == 0, err
    assert json.loads(out)["summary"]["new_tokens"] == 5


def test_limits_come_from_the_environment_and_bad_values_are_refused(monkeypatch, capsys, cli_pair, provider):
    assert Limits.from_env({}) == Limits()
    limits = Limits.from_env({"PLAYGROUND_MAX_PROMPT_TOKENS": "5", "PLAYGROUND_MAX_NEW_TOKENS": " 50 ",
                              "PLAYGROUND_MAX_SWEEP_RUNS": "9", "PLAYGROUND_QUEUE_SIZE": "2",
                              "PLAYGROUND_MAX_PROMPT_CHARS": ""})
    assert limits == Limits(max_prompt_tokens=5, max_new_tokens=50, max_sweep_runs=9, queue_size=2)
    for value in ("0", "-3", "ten", "1.5", "1e3", "\u00b2"):
        with pytest.raises(PlaygroundError, match=f"PLAYGROUND_QUEUE_SIZE must be a whole number >= 1, got {value!r}"):
            Limits.from_env({"PLAYGROUND_QUEUE_SIZE": value})
    with pytest.raises(PlaygroundError, match="max_new_tokens"):
        Limits(max_new_tokens=0)

    # read at call time: the UI handlers and the command line both apply them
    monkeypatch.setenv("PLAYGROUND_MAX_NEW_TOKENS", "50")
    with pytest.raises(PlaygroundError, match="max new tokens must be from 1 to 50, got 51"):
        ui_run(provider, max_new_tokens=51)
    assert "max new tokens must be from 1 to 50, got 51" in cli_error(capsys, "--prompt", PROMPT,
                                                                       "--max-new-tokens", "51")
    monkeypatch.setenv("PLAYGROUND_MAX_PROMPT_TOKENS", "5")
    message = "the prompt is 8 tokens; this playground takes at most 5 (PLAYGROUND_MAX_PROMPT_TOKENS)"
    with pytest.raises(PlaygroundError) as e:
        ui_run(provider)
    assert message in str(e.value) and message in cli_error(capsys, "--prompt", PROMPT)
    monkeypatch.setenv("PLAYGROUND_MAX_PROMPT_CHARS", "10")
    message = "the prompt is 23 characters; this playground takes at most 10 (PLAYGROUND_MAX_PROMPT_CHARS)"
    with pytest.raises(PlaygroundError) as e:
        ui_run(provider)
    assert message in str(e.value) and message in cli_error(capsys, "--prompt", PROMPT)
    monkeypatch.setenv("PLAYGROUND_MAX_NEW_TOKENS", "lots")
    assert "PLAYGROUND_MAX_NEW_TOKENS must be a whole number >= 1, got 'lots'" in cli_error(capsys, "--prompt", PROMPT)
    from playground.ui import build_ui

    with pytest.raises(PlaygroundError, match="PLAYGROUND_MAX_NEW_TOKENS"):  # app.py exits with this message
        build_ui(provider)


def test_the_replay_limits_come_from_the_environment_and_bad_values_are_refused():
    limits = Limits.from_env({"PLAYGROUND_MAX_REPLAY_TURNS": "12", "PLAYGROUND_MAX_REPLAY_TOKENS": " 512 ",
                              "PLAYGROUND_REPLAY_CHUNK_TOKENS": ""})
    assert limits == Limits(max_replay_turns=12, max_replay_tokens=512)
    assert limits.replay_chunk_tokens == 256 and limits.max_trace_line_bytes == 64 * 512
    for var in ("PLAYGROUND_MAX_REPLAY_TURNS", "PLAYGROUND_MAX_REPLAY_TOKENS", "PLAYGROUND_REPLAY_CHUNK_TOKENS"):
        with pytest.raises(PlaygroundError, match=f"{var} must be a whole number >= 1, got '0'"):
            Limits.from_env({var: "0"})
    with pytest.raises(PlaygroundError, match="at most 512 per turn \\(PLAYGROUND_MAX_REPLAY_TOKENS\\)"):
        limits.check_replay_tokens(500, 13)
    limits.check_replay_tokens(500, 12)


def test_build_ui_reads_the_limits_once_for_the_queue_and_the_controls(provider, monkeypatch):
    from playground.ui import build_ui

    monkeypatch.setenv("PLAYGROUND_QUEUE_SIZE", "3")
    monkeypatch.setenv("PLAYGROUND_MAX_NEW_TOKENS", "100")
    demo = build_ui(provider)
    assert demo._queue.max_size == 3
    numbers = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) in ("max-new", "sweep-new")]
    # the boxes name the limit; the events' request parser enforces it (Gradio's own check would stop the event
    # before its status line could say why)
    assert len(numbers) == 2 and all(b.info == "1 to 100" and b.maximum is None for b in numbers)
    assert build_ui(provider, limits=Limits(queue_size=7))._queue.max_size == 7


def test_sweep_size_is_limited(provider, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MAX_SWEEP_RUNS", "20")
    with pytest.raises(PlaygroundError, match=r"k = 1..8 over 3 round\(s\) counts 27 \(rounds x \(largest k \+ 1\)\); .* at most 20 "
                                              r"\(PLAYGROUND_MAX_SWEEP_RUNS\)"):
        parse_sweep({**UI_DEFAULTS, "k_max": 8, "rounds": 3}, provider.drafter_names())
    # the UI's largest sweep (k up to 16, 5 rounds) fits the default
    Limits().check_sweep(16, 5)


def test_calibrate_checks_the_prompt_against_the_context(provider):
    with pytest.raises(PlaygroundError, match="context holds 256"):
        list(measure.stream_calibrate(provider, Session(), ui_request(provider, prompt=LONG), repeats=1, warmup=0))


# --- presets: unknown, malformed, and output that is not what the preset asks for -------------------------------

BAD_PRESETS = {
    "bad_json": ("{ not json", "not valid JSON"),
    "missing_field": (json.dumps({"name": "missing_field", "title": "t", "description": "d", "max_new_tokens": 8,
                                  "output_format": "text", "prompt": "w1"}), "field 'kind': missing"),
    "bad_schema": (json.dumps({"name": "bad_schema", "title": "t", "kind": "json", "description": "d",
                               "max_new_tokens": 8, "output_format": "json", "prompt": "w1",
                               "output_schema": {"type": "no-such-type"}}), "not a valid JSON Schema"),
}
RAW_JSON_PRESET = {"name": "raw_json", "title": "Raw JSON", "kind": "json", "description": "a raw JSON preset",
                   "prompt": "w1 w2 w3", "max_new_tokens": 6, "output_format": "json",
                   "output_schema": {"type": "object"}}


@pytest.fixture
def preset_dir(tmp_path, monkeypatch):
    for name, (text, _) in BAD_PRESETS.items():
        (tmp_path / f"{name}.json").write_text(text, encoding="utf-8")
    (tmp_path / "raw_json.json").write_text(json.dumps(RAW_JSON_PRESET), encoding="utf-8")
    monkeypatch.setattr(playground.inputs.presets, "PRESETS_DIR", tmp_path)
    return tmp_path


def test_malformed_preset_files_are_named_with_the_field_and_the_rest_still_load(preset_dir, capsys, cli_pair,
                                                                               provider):
    for name, (_, message) in BAD_PRESETS.items():
        with pytest.raises(playground.inputs.presets.PresetError) as e:
            load_preset(preset_dir / f"{name}.json")
        assert f"{name}.json" in str(e.value) and message in str(e.value)
        assert message in cli_error(capsys, "--preset", name)
        with pytest.raises(PlaygroundError, match=message.replace("(", r"\(")):
            ui_run(provider, preset=name)
    presets, errors = load_presets(strict=False)
    assert list(presets) == ["raw_json"] and len(errors) == 3
    # the command line lists the good ones and names each bad file; the UI shows the errors in its header
    assert main(["presets"]) == 1
    out, err = capsys.readouterr()
    assert "raw_json" in out and all(f"{name}.json" in err for name in BAD_PRESETS)
    choices, ui_errors = handlers.preset_choices()
    assert [v for _, v in choices] == ["", "raw_json"] and len(ui_errors) == 3
    from playground.ui import build_ui

    build_ui(provider)  # builds, showing the three errors


def test_output_that_is_not_json_for_a_json_preset_is_a_finding_not_an_error(preset_dir, capsys, cli_pair,
                                                                           provider):
    preset = get_preset("raw_json")
    check = check_output(preset, "w5 w9 w12")
    assert not check.ok and check.is_json is False and "no JSON object or array" in check.error
    code, out, err = cli(capsys, "--preset", "raw_json")  # a random model does not write JSON
    assert code == 0, err
    assert "output check: NOT valid (no JSON object or array found in the output)" in out
    views = ui_run(provider, preset="raw_json", prompt=preset.prompt, max_new_tokens=6)
    assert views[-1].status.startswith("Done") and "not valid JSON" in views[-1].check
    assert views[-1].doc["output_check"]["is_json"] is False


# --- the vocabulary check, through load_pair, the command line and the app ------------------------------------


def test_a_draft_whose_vocabulary_differs_is_refused_naming_the_first_mismatch(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MODEL_ROOTS", str(tmp_path))  # local models are allowed inside this folder
    target_dir, draft_dir = tmp_path / "target", tmp_path / "draft"
    tiny_model(vocab=64, dtype=torch.float32).save_pretrained(target_dir)
    word_tokenizer(WORDS).save_pretrained(target_dir)
    word_tokenizer(list(reversed(WORDS))).save_pretrained(draft_dir)  # same tokens, other ids
    capsys.readouterr()  # (save_pretrained's progress bars)
    message = "vocabularies differ: token 'w0' is id 0 in the"
    with pytest.raises(PlaygroundError, match=message):
        playground.pairs.loading.load_pair(str(target_dir), str(draft_dir), device="cpu", dtype="float32", progress=None)
    with pytest.raises(PlaygroundError, match="vocabularies differ"):
        check_vocab(word_tokenizer(WORDS), word_tokenizer(WORDS, extra=("w99",)))
    assert message in cli_error(capsys, "--prompt", PROMPT, "--target", str(target_dir), "--draft", str(draft_dir),
                                "--device", "cpu")
    choice = PairChoice(str(target_dir), str(draft_dir), "cpu", "float32")
    ui = serving.PairProvider(choice=choice, cache=serving.PairCache())
    with pytest.raises(PlaygroundError, match=message):
        ui_run(ui)


# --- a single token repeated thousands of times -------------------------------------------------------------------


def test_one_token_repeated_thousands_of_times_is_refused_by_the_limit_or_runs(capsys, cli_pair, provider):
    message = "the prompt is 5000 tokens; this playground takes at most 4096"
    with pytest.raises(PlaygroundError, match=message):
        ui_run(provider, prompt="w7 " * 5000)
    assert message in cli_error(capsys, "--prompt", "w7 " * 5000)
    # within the limits (the tiny target holds 256 positions) it runs to the end with either drafter
    for drafter in ("lookup", "draft"):
        views = ui_run(provider, prompt="w7 " * 200, drafter=drafter, max_new_tokens=40)
        assert views[-1].doc["summary"]["new_tokens"] <= 40 and views[-1].status.startswith("Done")


def test_prompt_lookup_stays_linear_on_repeats_and_on_its_worst_case():
    """lookup scans back from the end for the trailing n-gram: O(len * max_ngram) per proposal. On 10,000
    copies of one token it matches at once; the worst case is a trailing n-gram that never occurred, where
    every earlier position starts a partial match. Generous bound (a shared 2-core machine): 1 s per call."""
    same = [7] * 10_000
    t0 = time.perf_counter()
    assert lookup(same, 8, max_ngram=3) == [7]  # the latest match of the last 3 is followed by one token
    worst = [7] * 10_000 + [9]
    assert lookup(worst, 8, max_ngram=3) == []
    assert lookup(worst, 8, max_ngram=8) == []
    assert time.perf_counter() - t0 < 3.0


# --- exposure -------------------------------------------------------------------------------------------------------


def test_the_app_binds_loopback_unless_gradio_server_name_says_otherwise(monkeypatch):
    from playground.ui import launch, server_name

    assert server_name({}) == "127.0.0.1"
    assert server_name({"GRADIO_SERVER_NAME": ""}) == "127.0.0.1"  # empty is unset, not "all interfaces"
    assert server_name({"GRADIO_SERVER_NAME": "0.0.0.0"}) == "0.0.0.0"

    class FakeDemo:
        def launch(self, **kwargs):
            return kwargs

    monkeypatch.delenv("GRADIO_SERVER_NAME", raising=False)
    assert launch(FakeDemo())["server_name"] == "127.0.0.1"
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")  # what the Docker image sets, deliberately
    assert launch(FakeDemo())["server_name"] == "0.0.0.0"
    app = (Path(__file__).resolve().parent.parent / "app.py").read_text(encoding="utf-8")
    assert "launch(demo)" in app and "server_name" not in app  # app.py goes through playground.ui.launch


@pytest.fixture
def secret_env(monkeypatch, word_pair):
    """HF_TOKEN set, and leaked on purpose into places a careless recorder would copy: a recorded variable and
    the model's name (a hub URL with credentials)."""
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("MY_API_KEY", "k3y-" + SECRET[:12])
    monkeypatch.setenv("PLAYGROUND_TARGET_NOTE", f"https://user:{SECRET}@example.invalid/model")
    monkeypatch.setattr(word_pair, "target_name", f"https://user:{SECRET}@example.invalid/tiny-target")
    return SECRET


def assert_clean(text: str):
    assert SECRET not in text and SECRET[:12] not in text


def test_environment_records_never_hold_a_secret(secret_env, word_pair):
    env = environment(word_pair)
    assert "HF_TOKEN" not in env.variables and "MY_API_KEY" not in env.variables
    assert env.variables["PLAYGROUND_TARGET_NOTE"] == "https://user:<redacted>@example.invalid/model"
    assert env.pair.target.startswith("https://user:<redacted>@")
    assert_clean(json.dumps(env.to_dict()))
    assert "HF_TOKEN" not in recorded_variables()
    assert redact({"a": [f"x{SECRET}y", 3]}) == {"a": ["x<redacted>y", 3]}


def test_the_cli_never_prints_a_secret(secret_env, capsys, cli_pair):
    assert main(["info"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["environment"]["pair"]["target"].startswith("https://user:<redacted>@")
    assert_clean(out + err)
    code, out, err = cli(capsys, "--prompt", PROMPT, "--max-new-tokens", "4", "--json")
    assert code == 0 and json.loads(out)["summary"]["new_tokens"] == 4
    assert_clean(out + err)
    err = cli_error(capsys, "--preset", SECRET)  # an error message that would quote it
    assert "unknown preset '<redacted>'" in err
    assert_clean(err)


def test_the_lab_out_file_never_holds_a_secret(secret_env, capsys, cli_pair, tmp_path):
    out_file = tmp_path / "acceptance.json"
    assert main(["acceptance", "--prompt", PROMPT, "--ks", "2", "--max-new-tokens", "4", "--drafter", "draft",
                 "--out", str(out_file)]) == 0
    text = out_file.read_text(encoding="utf-8")
    assert json.loads(text)["environment"]["pair"]["target"].startswith("https://user:<redacted>@")
    assert_clean(text)  # (the lab's progress lines on stderr name the model as given: not checked here)


def test_the_ui_never_shows_logs_or_exports_a_secret(secret_env, provider, caplog):
    import gradio as gr

    from playground.ui.wiring import _guarded

    final = ui_run(provider, max_new_tokens=4)[-1]
    assert final.doc["environment"]["pair"]["target"].startswith("https://user:<redacted>@")
    assert_clean(json.dumps(final.doc) + final.status)
    with open(final.download, encoding="utf-8") as f:
        assert_clean(f.read())

    def failing(error):
        yield from ()
        raise error

    with caplog.at_level(logging.ERROR):
        for error in (PlaygroundError(f"could not load https://user:{SECRET}@example.invalid/m"),
                      RuntimeError(f"token {SECRET} rejected")):
            shown = []
            with pytest.raises(gr.Error) as e:
                shown.extend(_guarded(failing(error), lambda v: v, 2))  # what was shown before the error
            assert "redacted" in e.value.message and "<redacted>" in shown[-1][0]
            assert_clean(e.value.message + shown[-1][0])
    assert "rejected" in caplog.text  # the bug was logged, without the secret
    assert_clean(caplog.text)


# --- unknown or disallowed model ids (the policy is playground/pairs.py; here: the same rows as the table) -----------


@pytest.mark.parametrize("target, message", [
    ("someone/model", "the target 'someone/model' is not a model of a named pair, and arbitrary model ids are off"),
    ("/etc", "the target '/etc' is a local path not allowed: no model folders are configured"),
])
def test_an_unknown_or_disallowed_model_id_is_refused_before_loading(monkeypatch, capsys, target, message):
    import playground.pairs.registry as pairs

    monkeypatch.setattr(pairs, "hub_token", lambda: None)  # no token, nothing cached, no network
    monkeypatch.setattr(pairs, "is_cached", lambda repo_id: False)
    for name in ("PLAYGROUND_ALLOW_ANY_MODEL", "PLAYGROUND_MODEL_ROOTS", "PLAYGROUND_PAIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(playground.pairs.registry, "load_pair", lambda *a, **k: pytest.fail("nothing may load"))
    assert message in cli_error(capsys, "--prompt", PROMPT, "--target", target, "--draft", "none")
    ui = serving.PairProvider(choice=PairChoice(target, None, "cpu", "float32"), cache=serving.PairCache())
    with pytest.raises(PlaygroundError) as e:
        ui_run(ui, drafter="lookup")
    assert message in str(e.value)
    # the app's pair menu: only named pairs can be picked unless PLAYGROUND_ALLOW_ANY_MODEL=1
    menu = serving.PairProvider(choice=serving.choice_from_env({}), cache=serving.PairCache())
    with pytest.raises(PlaygroundError, match="unknown model pair"):
        handlers.select_pair(menu, None, target)


def test_an_unexpected_cli_failure_keeps_its_traceback_with_secrets_redacted(secret_env, capsys, monkeypatch):
    import playground.cli.info as cli_info

    def broken():
        raise RuntimeError(f"something broke near {SECRET}")

    monkeypatch.setattr(cli_info, "cmd_presets", broken)
    assert main(["presets"]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" in err and "RuntimeError: something broke near <redacted>" in err
    assert "unexpected failure" in err
    assert_clean(out + err)
