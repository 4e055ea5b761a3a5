"""Triton model ``detokenize``: post-processing that drives the engine (serving/detokenize_adapter.py)."""

from serving.detokenize_adapter import TritonPythonModel  # noqa: F401
