"""Engines as plain Python (no Triton): the embedded stand-in, and TensorRT-LLM's engine request read
from its input tensors, which every engine adapter in ``model_repository/llm/`` parses the same way."""
