"""`timing --random-weights` (lab/forwards.py, cli/random_timing.py): the arithmetic from timings to v(n), c, the
floor and the predictions, checked on a fake clock whose costs are known; the bytes a step streams; the command end
to end on a layer cut of a shipped pair's shapes, its saved result reprinted by `report`, and its refusals."""

import json

import pytest
import torch

from playground.cli.entry import main
from playground.core.cost import predicted_speedup
from playground.lab import forwards
from playground.lab.forwards import streamed_bytes, time_forwards
from playground.lab.forwards_report import forwards_text
from playground.lab.report import report
from playground.results import load_result
from tests.tiny import tiny_model, tiny_pair

PASS_FIXED, PASS_PER_TOKEN, DRAFT_STEP = {"eager": 10.0, "static": 6.0}, 0.5, {"eager": 4.0, "static": 1.0}


class FakeClock:
    t = 0.0


class FakeLM:
    """An LM whose feeds advance the fake clock: a target pass over n tokens costs fixed + n x per token, a draft
    step its arm's cost; prefill and crops cost nothing."""

    def __init__(self, arm, draft):
        self.arm, self.draft, self.n, self.timed = arm, draft, 0, False

    def __len__(self):
        return self.n

    def reserve(self, n):
        pass

    def feed(self, ids, last_only=False):
        if self.timed:
            FakeClock.t += DRAFT_STEP[self.arm] if self.draft else PASS_FIXED[self.arm] + PASS_PER_TOKEN * len(ids)
        self.timed = True  # the first feed is the context's prefill
        self.n += len(ids)
        return torch.zeros(1, 8)

    def crop(self, n):
        self.n = n


def fake_timer(device):
    def time_it(fn):
        t0 = FakeClock.t
        fn()
        return FakeClock.t - t0, None

    return time_it


@pytest.fixture
def faked(monkeypatch):
    monkeypatch.setattr(forwards, "_timer", fake_timer)
    monkeypatch.setattr(forwards, "_target_lm", lambda pair, arm, capacity: FakeLM(arm, draft=False))
    monkeypatch.setattr(forwards, "_draft_lm", lambda pair, arm: FakeLM(arm, draft=True))
    monkeypatch.setattr(forwards, "copy_bandwidth", lambda device: 1e9)


def test_v_c_and_the_predictions_come_from_each_arms_own_timings(faked):
    pair = tiny_pair(tiny_model(), tiny_model(seed=1))
    result = time_forwards(pair, arms=("eager", "static"), context=16, n_max=9, rounds=2, repeats=2)
    for arm in ("eager", "static"):
        a = result.arms[arm]
        step = PASS_FIXED[arm] + PASS_PER_TOKEN
        assert a.target_step_s == pytest.approx(step)
        v = {n: (PASS_FIXED[arm] + PASS_PER_TOKEN * n) / step for n in range(1, 10)}
        assert a.v == pytest.approx(v)
        assert a.c == pytest.approx(DRAFT_STEP[arm] / step)  # a chain of DRAFT_CHAIN steps, per step
        for alpha in (0.6, 0.8, 0.9):
            for k in range(1, 9):
                assert a.predicted[alpha][k] == pytest.approx(predicted_speedup(alpha, k, a.c, v))
    assert len(result.arms["eager"].raw) == 2  # the warm-up round is not among the timed ones
    assert result.floor.step_s == pytest.approx(streamed_bytes(pair.target, 16) / 1e9)
    assert "not measured" in result.acceptance


def test_a_step_streams_every_weight_but_an_untied_input_embedding_and_the_context_kv():
    model = tiny_model(vocab=64, hidden=32, layers=2, dtype=torch.float32)
    cfg = model.config
    weights = sum(p.numel() for p in model.parameters()) * 4  # untied: the table and the head apart
    kv = 2 * 2 * cfg.num_key_value_heads * (32 // cfg.num_attention_heads) * 10 * 4
    assert streamed_bytes(model, 10) == weights - 64 * 32 * 4 + kv
    cfg.tie_word_embeddings = True  # tied: the head reads the table, which counts once
    model.lm_head.weight = model.model.embed_tokens.weight
    assert streamed_bytes(model, 10) == sum(p.numel() for p in model.parameters()) * 4 + kv
    assert streamed_bytes(model.to(torch.bfloat16), 10) == (sum(p.numel() for p in model.parameters()) * 4 + kv) // 2


def test_graphs_and_unknown_arms_are_refused_on_a_cpu():
    pair = tiny_pair(tiny_model())
    for arms in (("graphed",), ("eager", "compiled")):
        with pytest.raises(Exception, match="graphed on CUDA only"):
            time_forwards(pair, arms=arms, context=8, n_max=3, rounds=1, repeats=1)


def test_the_command_times_a_layer_cut_of_a_shipped_pair_and_report_reprints_it(tmp_path, capsys):
    out = tmp_path / "forwards.json"
    assert main(["timing", "--random-weights", "--pair", "smollm2-1.7b", "--layers", "1", "--device", "cpu",
                 "--dtype", "float32", "--context", "16", "--ks", "2", "--rounds", "1", "--repeats", "1",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["shape"]["target_layers"] == 1 and doc["shape"]["draft_layers"] == 1
    assert doc["shape"]["layer_ratio"] == pytest.approx(30 / 24)
    assert set(doc["arms"]) == {"eager", "static"} and sorted(doc["arms"]["eager"]["v"]) == ["1", "2", "3"]
    assert "Acceptance is not measured" in printed and "floor:" in printed and "alpha 0.9" in printed
    back = load_result(out)  # the file reads back into the result it was saved from, and prints the same
    assert back.arms["eager"].predicted[0.9][1] == doc["arms"]["eager"]["predicted"]["0.9"]["1"]
    assert forwards_text(back) in printed
    assert report(out).splitlines()[1] == printed.splitlines()[1]


@pytest.mark.parametrize("args, message", [
    (["--pair", "smollm2-1.7b", "--device", "cuda"], "CUDA is not available"),
    (["--pair", "smollm2-1.7b", "--ks", "20"], "from 1 to 16"),
    (["--target", "someone/unknown-model"], "no shipped config"),
    ([], "needs --pair"),
])
def test_bad_requests_get_one_line_and_exit_2(args, message, capsys):
    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["timing", "--random-weights", *args]) == 2
    assert message in capsys.readouterr().err


def test_a_steps_count_follows_the_models_depth_and_files_without_one_still_load():
    def counted(layers):
        pair = tiny_pair(tiny_model(layers=layers, dtype=torch.float32), tiny_model(layers=1, dtype=torch.float32))
        return forwards.step_kernels(pair, list(range(8)))

    two, three, four = counted(2), counted(3), counted(4)
    assert two.unit.startswith("aten ops") and "CPU" in two.unit  # not kernels: a CPU has none to count
    assert two.draft == four.draft > 0  # the same 1-layer draft each time
    assert four.target - three.target == three.target - two.target > 0  # a fixed count per layer
    old = load_result("docs/results/forwards-llama-3.2-3b-layers4-epyc.json")  # saved before steps were counted
    assert old.step_kernels is None and "1-token step" not in forwards_text(old)
