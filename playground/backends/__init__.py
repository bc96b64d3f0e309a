"""Serving-engine backends: vLLM over its OpenAI-compatible HTTP API, in its own process and venv (its
transformers pin conflicts with ours): the server manager, the streaming client, the per-step reconstruction
(vllm_steps), vLLM's n-gram proposer replayed (vllm_ngram) and the `vllm-sweep` experiment (vllm_sweep,
vllm_report).

No torch and no transformers are imported by the server manager, the client or the step reconstruction. What vLLM
does not expose (the draft / verify time split, p and q) is None in the records, never estimated.
"""

from .vllm_client import VllmClient, VllmClientError, stream_request
from .vllm_server import SpecConfig, VllmServer, VllmServerError, parse_spec_config, vllm_available
from .vllm_steps import ServedRequest, ServedStep

__all__ = ["ServedRequest", "ServedStep", "SpecConfig", "VllmClient", "VllmClientError", "VllmServer",
           "VllmServerError", "parse_spec_config", "stream_request", "vllm_available"]
