"""Named model pairs, the policy on which models may load, and the hub's failures as messages.

Nothing here downloads: the hub's errors are raised by stand-ins for transformers' loaders, and the
policy refuses before any load is tried.
"""

import pytest
import torch

from playground.cli import main
from playground.errors import PlaygroundError
from playground.pairs import hub
from playground.pairs import loading as models
from playground.pairs import registry as pairs
from playground.pairs.registry import (
    PAIRS,
    ModelPolicy,
    PairChoice,
    Placement,
    check_access,
    choose_pair,
    get_pair_spec,
    load_choice,
    parse_custom,
)
from tests.test_models import save

SECRET = "hf_playgroundTestSecret123"


@pytest.fixture
def no_hub(monkeypatch):
    """No token, nothing cached: what a fresh host sees."""
    monkeypatch.setattr(pairs, "hub_token", lambda: None)
    monkeypatch.setattr(pairs, "is_cached", lambda repo_id: False)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "PLAYGROUND_ALLOW_ANY_MODEL", "PLAYGROUND_PAIR"):
        monkeypatch.delenv(name, raising=False)


# --- the registry ------------------------------------------------------------------------------------------


def test_the_named_pairs():
    assert list(PAIRS) == ["embedded", "qwen2.5-7b", "llama-3.1-8b", "llama-3.2-3b", "smollm2-1.7b"]
    assert (PAIRS["embedded"].target, PAIRS["embedded"].draft) == ("embedded", "int8")
    assert PAIRS["smollm2-1.7b"].draft == "embedded"  # the embedded 135M drafts for its big sibling
    assert PAIRS["qwen2.5-7b"].hub_ids == ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct")
    assert [p.name for p in PAIRS.values() if p.gated] == ["llama-3.1-8b", "llama-3.2-3b"]
    assert [p.name for p in PAIRS.values() if p.needs_cuda] == ["qwen2.5-7b", "llama-3.1-8b", "llama-3.2-3b"]
    assert all(p.note and p.dtype == "auto" for p in PAIRS.values())


def test_unknown_pair_lists_the_names():
    with pytest.raises(
        PlaygroundError,
        match="unknown model pair 'gpt-5'; choose one of embedded, qwen2.5-7b, "
        "llama-3.1-8b, llama-3.2-3b, smollm2-1.7b",
    ):
        get_pair_spec("gpt-5")


def test_choose_pair_defaults_environment_and_overrides():
    allow_all = ModelPolicy(allow_any=True)
    assert choose_pair(env={}) == PairChoice("embedded", "int8", "auto", "auto", None, "embedded")
    qwen = choose_pair(env={"PLAYGROUND_PAIR": "qwen2.5-7b"})
    assert (qwen.name, qwen.target, qwen.draft) == (
        "qwen2.5-7b",
        "Qwen/Qwen2.5-7B-Instruct",
        "Qwen/Qwen2.5-0.5B-Instruct",
    )
    lookup_only = choose_pair(pair="qwen2.5-7b", draft="none", placement=Placement(device="cuda:1", dtype="float16"),
                              env={})
    assert (lookup_only.draft, lookup_only.device, lookup_only.dtype, lookup_only.name) == (
        None,
        "cuda:1",
        "float16",
        None,
    )  # an override makes it a custom pair
    legacy = choose_pair(target="org/model", env={}, policy=allow_all)  # --target alone: as before named pairs
    assert (legacy.target, legacy.draft, legacy.device, legacy.name) == ("org/model", "int8", "auto", None)
    assert choose_pair(target="embedded", draft="int8", env={}).name == "embedded"
    with pytest.raises(PlaygroundError, match="unknown model pair 'nope'"):
        choose_pair(env={"PLAYGROUND_PAIR": "nope"})


def test_parse_custom():
    assert parse_custom("org/t") == ("org/t", None)
    assert parse_custom(" org/t , org/d ") == ("org/t", "org/d")
    assert parse_custom("org/t, none") == ("org/t", None)
    for bad in ("", ", org/d", "a, b, c"):
        with pytest.raises(PlaygroundError, match="TARGET, DRAFT"):
            parse_custom(bad)


# --- the policy --------------------------------------------------------------------------------------------


def test_keywords_and_the_registrys_own_models_are_always_allowed():
    strict = ModelPolicy()
    for source in ("embedded", "int8", None, "meta-llama/Llama-3.2-1B-Instruct", "HuggingFaceTB/SmolLM2-1.7B-Instruct"):
        strict.check(source)


def test_other_hub_ids_only_when_allowed():
    with pytest.raises(
        PlaygroundError,
        match=r"the draft 'someone/model' is not a model of a named pair.*"
        r"PLAYGROUND_ALLOW_ANY_MODEL=1",
    ):
        ModelPolicy().check("someone/model", "draft")
    ModelPolicy(allow_any=True).check("someone/model")
    assert ModelPolicy.from_env({"PLAYGROUND_ALLOW_ANY_MODEL": "1"}).allow_any
    assert not ModelPolicy.from_env({"PLAYGROUND_ALLOW_ANY_MODEL": "0"}).allow_any


def test_local_paths_only_inside_the_model_roots(tmp_path):
    inside, outside = tmp_path / "models" / "m", tmp_path / "elsewhere" / "m"
    inside.mkdir(parents=True)
    outside.mkdir(parents=True)
    policy = ModelPolicy.from_env({"PLAYGROUND_MODEL_ROOTS": f"/nonexistent:{tmp_path / 'models'}"})
    policy.check(str(inside))
    with pytest.raises(PlaygroundError, match="outside the allowed model folders"):
        policy.check(str(outside))
    with pytest.raises(PlaygroundError, match="outside the allowed model folders"):
        policy.check(str(inside / ".." / ".." / "elsewhere" / "m"))
    link = tmp_path / "models" / "link"
    link.symlink_to(outside)  # a link inside a root that leads out of it
    with pytest.raises(PlaygroundError, match="outside the allowed model folders"):
        policy.check(str(link))
    # allowing any model does not widen configured roots; with no roots it allows any path
    with pytest.raises(PlaygroundError, match="outside"):
        ModelPolicy(allow_any=True, roots=policy.roots).check(str(outside))
    ModelPolicy(allow_any=True).check(str(outside))
    with pytest.raises(PlaygroundError, match="no model folders are configured.*PLAYGROUND_MODEL_ROOTS"):
        ModelPolicy().check("/etc")


# --- the command line --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,message",
    [
        (["info", "--target", "someone/model"], "not a model of a named pair"),
        (["info", "--pair", "embedded", "--draft", "someone/draft"], "the draft 'someone/draft'"),
        (["timing", "--target", "/etc", "--draft", "none"], "local path"),
        (["generate", "--prompt", "hi", "--pair", "gpt-5"], "choose one of embedded"),
        (["speed", "--pair", "nope"], "unknown model pair"),
    ],
)
def test_cli_refuses_disallowed_models_before_loading(monkeypatch, capsys, no_hub, argv, message):
    monkeypatch.setattr(pairs, "load_pair", lambda *a, **k: pytest.fail("nothing may load"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_cli_gated_pair_without_a_token_says_how(monkeypatch, capsys, no_hub):
    monkeypatch.setattr(pairs, "load_pair", lambda *a, **k: pytest.fail("nothing may load"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU host: the pair's device check passes
    assert main(["info", "--pair", "llama-3.2-3b"]) == 2
    err = capsys.readouterr().err
    assert "gated model" in err and "no Hugging Face token is set" in err and "HF_TOKEN" in err
    assert "https://huggingface.co/meta-llama/Llama-3.2-1B-Instruct" in err


def test_cli_loads_a_local_model_inside_the_roots(tmp_path_factory, capsys):
    # conftest puts pytest's temp folder in PLAYGROUND_MODEL_ROOTS, as an operator would put theirs
    target = save(tmp_path_factory.mktemp("cli-pair"), "t", 0)
    assert main(["info", "--target", str(target), "--draft", "none", "--device", "cpu"]) == 0
    assert '"target_bytes"' in capsys.readouterr().out


def test_cli_lists_the_pairs(capsys, no_hub):
    assert main(["pairs"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in PAIRS) and "* embedded" in out and "downloads on first use" in out
    assert "Other hub ids: refused" in out


# --- the hub: gated, missing, offline; the token never shown -------------------------------------------------


def hub_error(cls, message):
    err = cls.__new__(cls)  # the hub's errors want an HTTP response; the message is all that matters here
    Exception.__init__(err, message)
    return err


def failing_loader(error):
    def from_pretrained(source, **kwargs):
        assert "trust_remote_code" not in kwargs
        raise OSError(f"could not reach it with {SECRET}") from error

    return from_pretrained


@pytest.mark.parametrize("which", ["tokenizer", "model"])
def test_hub_failures_are_clear_messages_without_the_token(monkeypatch, which):
    from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setattr(hub, "hub_token", lambda: SECRET)
    cls = AutoTokenizer if which == "tokenizer" else AutoModelForCausalLM

    def load():
        if which == "tokenizer":
            return models.load_tokenizer("meta-llama/Llama-3.2-3B-Instruct")
        return models.load_model("meta-llama/Llama-3.2-3B-Instruct", torch.device("cpu"), torch.float32)

    cases = [
        (GatedRepoError, "is a gated model and the token set (HF_TOKEN or a saved login) has no access to it"),
        (RepositoryNotFoundError, "there is no model 'meta-llama/Llama-3.2-3B-Instruct' on the Hugging Face hub"),
        (LocalEntryNotFoundError, "is not in the local Hugging Face cache"),
    ]
    for error_cls, message in cases:
        monkeypatch.setattr(cls, "from_pretrained", failing_loader(hub_error(error_cls, f"403 for {SECRET}")))
        with pytest.raises(PlaygroundError) as info:
            load()
        assert message in str(info.value) and SECRET not in str(info.value)
    # any other failure keeps its first line, with the token blanked out
    monkeypatch.setattr(cls, "from_pretrained", failing_loader(ValueError("odd")))
    with pytest.raises(PlaygroundError) as info:
        load()
    assert "could not" in str(info.value) and SECRET not in str(info.value) and "<redacted>" in str(info.value)


def test_access_check_needs_no_network(monkeypatch, no_hub):
    with pytest.raises(PlaygroundError, match="gated model and no Hugging Face token is set"):
        check_access(choose_pair(pair="llama-3.2-3b", env={}))
    check_access(choose_pair(pair="qwen2.5-7b", env={}))  # not gated
    monkeypatch.setattr(pairs, "is_cached", lambda repo_id: True)
    check_access(choose_pair(pair="llama-3.2-3b", env={}))  # cached earlier: no token needed to load it


def test_load_choice_says_it_downloads_and_passes_the_placement(monkeypatch, no_hub):
    calls, said = [], []
    monkeypatch.setattr(pairs, "offline", lambda: False)
    monkeypatch.setattr(pairs, "load_pair", lambda *a, **k: calls.append((a, k)) or "pair")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    choice = choose_pair(pair="qwen2.5-7b", placement=Placement(device="cuda", device_map="auto"), env={})
    assert load_choice(choice, progress=said.append) == "pair"
    assert [m.split(" into ")[0] for m in said] == [
        "Downloading Qwen/Qwen2.5-7B-Instruct",
        "Downloading Qwen/Qwen2.5-0.5B-Instruct",
    ]
    ((args, kwargs),) = calls
    assert args == ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct")
    assert kwargs["device"] == "cuda" and kwargs["device_map"] == "auto" and kwargs["dtype"] == "auto"


def test_nothing_sets_trust_remote_code():
    from pathlib import Path

    source = "\n".join(p.read_text() for p in Path(pairs.__file__).parents[1].rglob("*.py"))
    assert "trust_remote_code=" not in source


# --- the app: the pair menu and the environment's pair -------------------------------------------------------


def test_app_choice_from_the_environment():
    from playground.ui.serving import choice_from_env, menu_value

    choice = choice_from_env({"PLAYGROUND_PAIR": "smollm2-1.7b", "PLAYGROUND_DEVICE": "cuda:0"})
    assert (choice.target, choice.draft, choice.device, choice.name) == (
        "HuggingFaceTB/SmolLM2-1.7B-Instruct",
        "embedded",
        "cuda:0",
        "smollm2-1.7b",
    )
    assert menu_value(choice_from_env({})) == "embedded"
    assert menu_value(choice_from_env({"PLAYGROUND_TARGET": "/m", "PLAYGROUND_DRAFT": "none"})) == "/m, none"


def test_app_refuses_a_disallowed_pair_at_load_without_network(monkeypatch, no_hub):
    from playground.ui.serving import PairCache, PairProvider, choice_from_env

    monkeypatch.setattr(pairs, "load_pair", lambda *a, **k: pytest.fail("nothing may load"))
    provider = PairProvider(choice=PairChoice("someone/model", None, "cpu", "float32"), cache=PairCache())
    with pytest.raises(PlaygroundError, match="not a model of a named pair"):
        provider.get()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU host: past the pair's device check
    gated = PairProvider(choice=choice_from_env({"PLAYGROUND_PAIR": "llama-3.2-3b"}), cache=PairCache())
    with pytest.raises(PlaygroundError, match="gated model"):
        gated.get()


def test_pair_menu_selects_named_pairs_and_refuses_typed_ids(monkeypatch, no_hub):
    from playground.ui import handlers
    from playground.ui.serving import PairCache, PairProvider, choice_from_env

    provider = PairProvider(choice=choice_from_env({}), cache=PairCache(load=None))
    choices, value, typed = handlers.pair_choices(provider)
    assert [v for _, v in choices] == list(PAIRS) and value == "embedded" and typed is False

    view = handlers.select_pair(provider, None, "qwen2.5-7b")
    assert view.session.pair.target == "Qwen/Qwen2.5-7B-Instruct" and "~16 GB" in view.info
    drafters = [name for _, name in view.drafters]
    assert "draft" in drafters and "llama.cpp" not in drafters  # llama.cpp drafts for the embedded target only
    assert provider.for_session(view.session).choice.name == "qwen2.5-7b"
    assert not provider.for_session(view.session).loaded()  # choosing loads nothing
    back = handlers.select_pair(provider, view.session, "embedded")
    assert back.session.pair is None and provider.for_session(back.session) is provider

    for bad in ("someone/model", "someone/model, other/draft", "", None):
        with pytest.raises(PlaygroundError, match="model pair"):
            handlers.select_pair(provider, None, bad)

    monkeypatch.setenv("PLAYGROUND_ALLOW_ANY_MODEL", "1")
    assert handlers.pair_choices(provider)[2] is True
    custom = handlers.select_pair(provider, None, "someone/model, none").session.pair
    assert (custom.target, custom.draft, custom.name) == ("someone/model", None, None)  # no named pair
    with pytest.raises(PlaygroundError, match="local path"):  # roots still bound local paths
        handlers.select_pair(provider, None, "/etc, none")


def test_pair_cache_keeps_at_most_max_pairs():
    from playground.ui.serving import PairCache

    loads = []
    cache = PairCache(load=lambda t, d, **k: loads.append(t) or object(), max_pairs=1)
    a, b = PairChoice("a", None), PairChoice("b", None)
    cache.get(a)
    cache.get(b)
    assert not cache.loaded(a) and cache.loaded(b)
    two = PairCache(load=lambda t, d, **k: loads.append(t) or object(), max_pairs=2)
    two.get(a), two.get(b), two.get(a)  # a used last: b goes first
    two.get(PairChoice("c", None))
    assert two.loaded(a) and not two.loaded(b) and loads == ["a", "b", "a", "b", "c"]


def test_build_ui_has_the_pair_menu_and_loads_nothing():
    pytest.importorskip("gradio")
    from playground.ui import build_ui
    from playground.ui.serving import PairCache, PairProvider, choice_from_env

    def refuse(*a, **k):
        raise AssertionError("build_ui must not load a model")

    demo = build_ui(PairProvider(choice=choice_from_env({}), cache=PairCache(load=refuse)))
    public = {fn.api_name for fn in demo.fns.values() if fn.api_visibility == "public"}
    assert "select_pair" in public
    menu = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "pair")
    assert [c[1] for c in menu.choices] == list(PAIRS) and menu.value == "embedded"
    api = demo.get_api_info()["named_endpoints"]  # the session state is no API parameter
    assert [p["parameter_name"] for p in api["/select_pair"]["parameters"]] == ["value"]
    assert [p["parameter_name"] for p in api["/load_preset"]["parameters"]] == ["preset", "prompt"]


# --- GPU pairs: refused without CUDA, ratios from the shipped configs ----------------------------------------


@pytest.mark.parametrize("name", ["qwen2.5-7b", "llama-3.1-8b", "llama-3.2-3b"])
def test_a_gpu_pair_without_cuda_is_refused_before_anything_loads(monkeypatch, capsys, no_hub, name):
    import time

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(pairs, "load_pair", lambda *a, **k: pytest.fail("nothing may load"))
    monkeypatch.setattr(pairs, "is_cached", lambda *a: pytest.fail("not even the cache is asked"))
    t0 = time.perf_counter()
    assert main(["info", "--pair", name]) == 2
    err = capsys.readouterr().err
    assert f"the {name} pair needs a CUDA GPU" in err and "--random-weights" in err and "Traceback" not in err
    assert time.perf_counter() - t0 < 10
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU host, but the CPU asked for
    with pytest.raises(PlaygroundError, match="the device asked for is the CPU"):
        pairs.check_device(choose_pair(pair=name, placement=Placement(device="cpu"), env={}))


def test_the_pairs_ratios_come_from_the_shipped_configs(capsys):
    qwen = PAIRS["qwen2.5-7b"].ratios
    assert (qwen.draft_layers, qwen.target_layers) == (24, 28)
    # published sizes: Qwen2.5-7B 7.62B parameters, 0.5B 0.49B (their model cards)
    assert abs(qwen.target_params / 1e9 - 7.62) < 0.02 and abs(qwen.draft_params / 1e9 - 0.49) < 0.01
    llama = PAIRS["llama-3.1-8b"].ratios
    assert abs(llama.target_params / 1e9 - 8.03) < 0.02 and abs(llama.draft_params / 1e9 - 1.24) < 0.01
    assert llama.layer_ratio == 0.5
    assert PAIRS["smollm2-1.7b"].ratios.layer_ratio > 1  # the deep draft its note warns of
    assert PAIRS["embedded"].ratios is None  # the int8 copy has no config of its own
    assert main(["pairs"]) == 0
    out = capsys.readouterr().out
    assert "24/28 layers (0.86)" in out and "GPU only" in out
