"""Default media limits, written once for the multimodal stage and the launcher's settings.

They are vLLM 0.32's where it has one: ``limit_mm_per_prompt`` (999 per modality),
``VLLM_MAX_IMAGE_PIXELS`` (Pillow's decompression-bomb limit) and ``VLLM_IMAGE_FETCH_TIMEOUT``.
vLLM has no cap on an item's encoded bytes; ours bounds what one item may make a stub hold.
Kept free of heavy imports: the launcher reads it.
"""

DEFAULT_MAX_ITEMS_PER_PROMPT = 999
DEFAULT_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_MAX_PIXELS = 178_956_970
DEFAULT_FETCH_TIMEOUT_S = 5.0
# transformers' torchvision-backed image processors, what vLLM gets wherever torchvision is
# installed ("slow": the PIL-based ones); renderer/multimodal/families.py implements both.
DEFAULT_IMAGE_PROCESSOR = "fast"
# Where mm_process resizes, normalizes and patches ("auto": the GPU where its instance is
# KIND_GPU, else the CPU) and where it decodes JPEG images ("cpu": Pillow, as vLLM does).
DEFAULT_IMAGE_DEVICE = "auto"
DEFAULT_IMAGE_DECODE_DEVICE = "cpu"
