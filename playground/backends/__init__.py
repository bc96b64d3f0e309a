"""Serving-engine backends: vLLM over its OpenAI-compatible HTTP API, in its own process and venv.

  vllm_server   VllmServer: start vLLM (its own venv, 127.0.0.1, a free port, a speculative config),
                wait for /health, report the startup time and the thread budget, stop it by its own pid
  vllm_client   VllmClient / stream_request: one streamed completion -> ServedStep records live, then a
                ServedRequest (the steps from vLLM's own per-step metrics, the acceptance histogram)
  vllm_steps    the pure part: chunks + `metrics.speculative_decoding` -> per-step records
  vllm_ngram    vLLM's n-gram proposer rewritten in Python, greedy replay, the cross-check with our lookup
  vllm_sweep    the `vllm-sweep` experiment (presets x k x concurrency x method), vllm_report its tables

No torch and no transformers are imported by the server manager, the client or the step reconstruction:
vLLM runs in another process (another venv: its transformers pin conflicts with ours). What vLLM does not
expose (the draft / verify time split, p and q) is None in the records, never estimated.
"""

from .vllm_client import VllmClient, VllmClientError, stream_request
from .vllm_server import SpecConfig, VllmServer, VllmServerError, parse_spec_config, vllm_available
from .vllm_steps import ServedRequest, ServedStep

__all__ = ["ServedRequest", "ServedStep", "SpecConfig", "VllmClient", "VllmClientError", "VllmServer",
           "VllmServerError", "parse_spec_config", "stream_request", "vllm_available"]
