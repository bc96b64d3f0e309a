"""Timing, memory, dtype and placement on CUDA.

The first part runs everywhere, with torch.cuda's answers replaced: which GPUs the clock synchronises, the
memory report's warnings, the dtype chosen by the device's support, when accelerate's device_map is used.
The second part needs a GPU (PLAYGROUND_DEVICE, default cuda; skipped without one): scripts/gpu_check.sh
runs it on a lease.
"""

import copy
import os

import pytest
import torch

from playground.core.cached import CachedLM
from playground.core.clock import Clock
from playground.core.engine import plain_generate, speculative_generate
from playground.core.lean import LeanLM
from playground.core.records import Iteration, Step, summarize
from playground.core.sampling import SamplingConfig
from playground.drafters.proposers import DraftModelProposer
from playground.errors import PlaygroundError
from playground.lab.forwards import step_kernels
from playground.pairs import loading as models  # the loading functions, patched and called by name
from playground.pairs.loading import load_pair
from playground.pairs.models import ModelPair, memory_report, resolve_device_map, resolve_dtype
from tests.test_models import save
from tests.tiny import tiny_model, tiny_pair

DEVICE = os.environ.get("PLAYGROUND_DEVICE", "cuda")
needs_gpu = pytest.mark.skipif(
    not DEVICE.startswith("cuda") or not torch.cuda.is_available(),
    reason="needs a CUDA device (set PLAYGROUND_DEVICE=cuda; scripts/gpu_check.sh)",
)


# --- everywhere: torch.cuda's answers replaced ---------------------------------------------------------------


def test_clock_synchronises_every_gpu_of_the_pair_once(monkeypatch):
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: synced.append(d))
    gpu0, gpu1 = torch.device("cuda", 0), torch.device("cuda", 1)
    clock = Clock(gpu0, devices=(torch.device("cpu"), gpu0, gpu1))
    clock.now()
    assert synced == [gpu0, gpu1]  # a target split by device_map: every device it occupies, each once


def test_clock_on_cpu_never_touches_cuda(monkeypatch, pair64):
    def refuse(*a):
        raise AssertionError("no CUDA call on CPU")

    monkeypatch.setattr(torch.cuda, "synchronize", refuse)
    clock = Clock.for_pair(pair64)
    assert pair64.devices == (torch.device("cpu"),)
    a = clock.now()
    assert clock.now() >= a


def fake_cuda_pair(monkeypatch, free, total, device_map=None):
    model = tiny_model(vocab=64, seed=0, dtype=torch.float32)
    if device_map is not None:
        model.hf_device_map = device_map
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d=None: (free, total))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d=None: 123)
    # The weights stay on the CPU; only the report's view of the device is CUDA.
    return ModelPair(target=model, tokenizer=None, device=torch.device("cuda", 0), devices=(torch.device("cuda", 0),))


def test_memory_report_on_cuda_reads_mem_get_info_and_warns_when_nearly_full(monkeypatch):
    gib = 2**30
    report = memory_report(fake_cuda_pair(monkeypatch, free=40 * gib, total=80 * gib))
    assert report["device_free_bytes"] == 40 * gib and report["device_total_bytes"] == 80 * gib
    assert report["target_bytes"] > 0 and report["warnings"] == []
    low = memory_report(fake_cuda_pair(monkeypatch, free=2 * gib, total=80 * gib))  # 2.5% free
    assert len(low["warnings"]) == 1 and "cuda:0 has 2048 MiB free of 80.0 GiB" in low["warnings"][0]


def test_memory_report_warns_when_accelerate_offloaded_part_of_the_target(monkeypatch):
    pair = fake_cuda_pair(monkeypatch, 40 * 2**30, 80 * 2**30, device_map={"model.layers.0": 0, "lm_head": "cpu"})
    (warning,) = memory_report(pair)["warnings"]
    assert "part of the target on cpu" in warning


def test_auto_dtype_follows_the_gpus_bf16_support(monkeypatch):
    cuda = torch.device("cuda")
    asked = []
    monkeypatch.setattr(
        torch.cuda,
        "is_bf16_supported",
        lambda including_emulation=True: asked.append(including_emulation) or not including_emulation,
    )
    assert resolve_dtype("auto", cuda) == torch.bfloat16 and asked == [False]  # native support only
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_dtype("auto", cuda) == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert resolve_dtype("auto", cuda) == torch.float16
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32


def test_device_map_only_when_the_target_does_not_fit_one_of_several_gpus_or_when_asked(monkeypatch):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device_map(None, "auto", cuda) is None  # it fits one GPU: whole there, not split
    assert resolve_device_map(None, "auto", cuda, fits=False) == "auto"
    assert resolve_device_map(None, "cuda", cuda, fits=False) == "auto"
    assert resolve_device_map(None, "cuda:0", torch.device("cuda", 0), fits=False) is None  # one GPU named: there
    assert resolve_device_map("none", "auto", cuda) is None
    assert resolve_device_map(None, "auto", cpu) is None  # CPU behaviour unchanged
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device_map(None, "auto", cuda, fits=False) is None
    assert resolve_device_map("sequential", "cuda", cuda) == "sequential"
    with pytest.raises(PlaygroundError, match="across GPUs, but the device is cpu"):
        resolve_device_map("auto", "cpu", cpu)
    with pytest.raises(PlaygroundError, match="unknown device map"):
        resolve_device_map("everywhere", "auto", cuda)


def test_int8_draft_keeps_auto_on_the_cpu_and_explains_itself_on_a_gpu(monkeypatch, tmp_path):
    target = save(tmp_path, "t", 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU host
    pair = load_pair(target, "int8", device="auto", dtype="auto", progress=None)
    assert pair.device.type == "cpu" and pair.dtype == torch.float32 and pair.draft is not None
    with pytest.raises(PlaygroundError, match="int8 draft is a CPU-only quantization.*--draft none"):
        load_pair(target, "int8", device="cuda", progress=None)


def test_a_target_too_big_for_one_gpu_is_found_from_its_config_before_loading(monkeypatch):
    gib = 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d=None: (40 * gib, 80 * gib))
    cuda = torch.device("cuda", 0)
    assert models.fits_one_gpu("Qwen/Qwen2.5-7B-Instruct", torch.bfloat16, cuda)  # 15 GB in 40 GB free
    assert not models.fits_one_gpu("Qwen/Qwen2.5-7B-Instruct", torch.float64, cuda)  # 61 GB
    assert models.fits_one_gpu("someone/unknown", torch.bfloat16, cuda)  # no config here: one GPU


def test_device_map_is_passed_to_transformers_and_not_followed_by_a_move(monkeypatch):
    seen = {}
    model = tiny_model(vocab=64, seed=0, dtype=torch.float32)

    def fake_from_pretrained(source, **kwargs):
        seen.update(kwargs)
        return model

    from transformers import AutoModelForCausalLM

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", fake_from_pretrained)
    monkeypatch.setattr(model, "to", lambda *a, **k: (_ for _ in ()).throw(AssertionError("moved")))
    assert models.load_model("org/model", torch.device("cuda"), torch.bfloat16, device_map="auto") is model
    assert seen["device_map"] == "auto" and seen["dtype"] == torch.bfloat16 and "trust_remote_code" not in seen


# --- on a GPU --------------------------------------------------------------------------------------------------


def gpu_pair(target, draft, dtype=torch.float64):
    dev = torch.device(DEVICE)
    t = copy.deepcopy(target).to(dev, dtype)
    d = copy.deepcopy(draft).to(dev, dtype) if draft is not None else None
    return ModelPair(
        target=t,
        tokenizer=None,
        draft=d,
        device=dev,
        dtype=dtype,
        target_name="tiny-target",
        draft_name="tiny-draft" if d is not None else None,
    )


@needs_gpu
@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_speculative_equals_plain_on_the_gpu(target64, drafts64, k):
    pair = gpu_pair(target64, drafts64["useful"])
    prompt = [1, 2, 3, 4, 5]
    plain = [r.token for r in plain_generate(pair, prompt, max_new_tokens=30) if isinstance(r, Step)]
    records = list(
        speculative_generate(
            pair, prompt, proposer=DraftModelProposer(pair.draft, pair.device, None), k=k, max_new_tokens=30
        )
    )
    assert [t for r in records if isinstance(r, Iteration) for t in r.emitted] == plain
    s = summarize(records)
    assert s.alpha is not None and s.draft_s > 0 and s.verify_s > 0


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_lean_draft_forward_matches_transformers_on_the_gpu(target64, dtype):
    """The drafter's lean forward (core/lean.py) on the GPU, in the dtypes a GPU draft runs in."""
    model = copy.deepcopy(target64).to(DEVICE, dtype)
    ids = [3, 17, 42, 5, 9, 33, 8, 61]
    ours, theirs = LeanLM(model, DEVICE), CachedLM(model, DEVICE)
    got = [ours.feed(ids[:5])[-1], ours.feed(ids[5:6])[-1], ours.feed(ids[6:])[-1]]
    want = [
        theirs.feed(ids[:5], last_only=True)[-1],
        theirs.feed(ids[5:6])[-1],
        theirs.feed(ids[6:], last_only=True)[-1],
    ]
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.float(), b.float(), rtol=tol, atol=tol)
    assert ours.keys.device.type == "cuda" and ours.keys.dtype == dtype


@needs_gpu
def test_sampling_on_the_gpu_with_a_device_generator(target64, drafts64):
    pair = gpu_pair(target64, drafts64["useful"], dtype=torch.float32)
    sampling = SamplingConfig(do_sample=True, temperature=0.8, top_k=20, seed=3)

    def sample():
        proposer = DraftModelProposer(pair.draft, pair.device, None)
        records = speculative_generate(pair, [1, 2, 3], proposer=proposer, k=4, sampling=sampling, max_new_tokens=24)
        return [t for r in records if isinstance(r, Iteration) for t in r.emitted]

    runs = [sample(), sample()]
    assert runs[0] == runs[1] and len(runs[0]) == 24 and all(0 <= t < 64 for t in runs[0])  # seeded: repeatable


@needs_gpu
def test_clock_now_leaves_no_work_queued():
    x = torch.randn(4096, 4096, device=DEVICE)
    clock = Clock(DEVICE)
    t0 = clock.now()
    for _ in range(20):
        x = x @ x / 64
    t1 = clock.now()
    assert torch.cuda.current_stream().query()  # everything queued before now() has finished
    assert t1 > t0


@needs_gpu
def test_load_pair_on_the_gpu_picks_the_dtype_and_reports_memory(tmp_path):
    pair = load_pair(save(tmp_path, "t", 0), save(tmp_path, "d", 1), device=DEVICE, dtype="auto", progress=None)
    expected = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    assert pair.dtype == expected and next(pair.target.parameters()).dtype == expected
    assert pair.device.type == "cuda" and all(d.type == "cuda" for d in pair.devices)
    report = pair.memory_report()
    assert 0 < report["device_free_bytes"] <= report["device_total_bytes"] and report["target_bytes"] > 0
    ids = pair.tokenizer("w1 w2 w3")["input_ids"]
    proposer = DraftModelProposer(pair.draft, pair.device, pair.vocab_size)
    records = list(speculative_generate(pair, ids, proposer=proposer, k=3, max_new_tokens=12))
    assert summarize(records).new_tokens == 12


@needs_gpu
def test_tiny_pair_helper_still_runs_on_cpu_beside_the_gpu(target64):
    # CPU pairs keep working in a process that has initialised CUDA (the clock only syncs GPUs it holds).
    pair = tiny_pair(target64)
    assert [r.token for r in plain_generate(pair, [1, 2], max_new_tokens=4) if isinstance(r, Step)]


@needs_gpu
def test_a_steps_cuda_kernels_are_counted_and_follow_the_depth():
    """lab.forwards.step_kernels on the GPU: the profiler sees the kernels of a 1-token static step (what its CUDA
    graph replays), a fixed number more per layer."""
    def counted(layers):
        model = tiny_model(vocab=64, seed=0, layers=layers, dtype=torch.float32)
        return step_kernels(gpu_pair(model, tiny_model(vocab=64, seed=1, layers=1), dtype=torch.bfloat16), range(8))

    two, three, four = counted(2), counted(3), counted(4)
    assert two.unit == "CUDA kernels" and two.draft == four.draft > 0
    assert four.target - three.target == three.target - two.target > 0
