"""Typed lab results, one module per experiment family; importing the package registers every type, so
`load_result` reads any saved file."""

from . import calibration as calibration  # each family's module registers its result types where it declares them
from . import quality as quality
from . import replay as replay
from . import speed as speed
from . import vllm as vllm
from .base import FORMAT, KINDS, Result, from_document, load_result, read_document, result_kind

__all__ = ["FORMAT", "KINDS", "Result", "from_document", "load_result", "read_document", "result_kind"]
