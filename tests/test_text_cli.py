"""Token pieces for display, prompt encoding, and the command line."""

import json
import subprocess
import sys

import pytest

from playground.cli import main, run
from playground.errors import PlaygroundError
from playground.inputs.text import encode_prompt, token_pieces
from playground.pairs.loading import ensure_embedded_safetensors, load_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(ensure_embedded_safetensors(progress=None))


@pytest.mark.parametrize("text", ["Hello, world!", "café 東京 🙂 naïve", '{"a": [1, 2]}\n  def f(x):\n    return x'])
def test_pieces_join_to_the_decoded_text(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    pieces = token_pieces(tokenizer, ids)
    assert len(pieces) == len(ids)
    assert "".join(pieces) == tokenizer.decode(ids)
    assert "\ufffd" not in "".join(pieces)


def test_encode_prompt_uses_the_chat_template(tokenizer):
    ids = encode_prompt(tokenizer, "hi")
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")
    raw = encode_prompt(tokenizer, "hi", chat=False)
    assert tokenizer.decode(raw) == "hi"


@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_empty_prompt(tokenizer, text):
    with pytest.raises(PlaygroundError, match="empty"):
        encode_prompt(tokenizer, text)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["generate", "--prompt", "   "], "prompt is empty"),
        (["generate", "--prompt", "hi", "--k", "0"], "k must be from 1 to 16"),
        (["generate", "--prompt", "hi", "--k", "17"], "k must be from 1 to 16"),
        (["generate", "--prompt", "hi", "--sample", "--temperature", "0"], "temperature"),
        (["generate", "--prompt", "hi", "--sample", "--top-p", "1.5"], "top-p"),
        (["generate", "--preset", "no-such-preset"], "no-such-preset"),
    ],
)
def test_cli_bad_input_is_a_clear_error_not_a_traceback(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


@pytest.mark.slow
def test_cli_generate_json_on_the_embedded_pair(capsys):
    code = main(["generate", "--prompt", "Write a haiku about the sea.", "--k", "3", "--max-new-tokens", "12",
                 "--json", "--draft", "int8", "--drafter", "draft"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["new_tokens"] == 12 and doc["summary"]["mode"] == "speculative"
    assert doc["records"][0]["type"] == "Prefill"
    its = [r for r in doc["records"] if r["type"] == "Iteration"]
    assert sum(len(r["emitted"]) for r in its) == 12
    assert doc["summary"]["draft_s"] > 0 and doc["summary"]["verify_s"] > 0  # measured, not derived
    assert doc["environment"]["torch_threads"] >= 1 and doc["environment"]["pair"]["dtype"] == "float32"


@pytest.mark.slow
def test_cli_generate_prints_coloured_tokens_and_a_summary(capsys):
    code = main(["generate", "--prompt", "List three colours.", "--k", "2", "--max-new-tokens", "10",
                 "--color", "always", "--drafter", "lookup", "--draft", "none"])
    assert code == 0
    out = capsys.readouterr().out
    assert "\033[" in out and "summary (" in out and "torch threads" in out and "tokens/pass" in out


def test_the_console_script_exits_with_mains_status(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["playground", "presets"])
    with pytest.raises(SystemExit) as e:
        run()
    assert e.value.code == 0 and "json_extract" in capsys.readouterr().out


def test_help_and_presets_do_not_load_the_model_stack():
    code = ("import sys, contextlib, io\n"
            "from playground.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n"
            "        main(['--help'])\n"
            "    except SystemExit:\n"
            "        pass\n"
            "    assert main(['presets']) == 0\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
