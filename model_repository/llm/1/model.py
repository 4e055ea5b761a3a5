"""Triton model ``llm``: a thin alias of the shared generation adapter."""

from serving.llm_adapter import TritonPythonModel  # noqa: F401
