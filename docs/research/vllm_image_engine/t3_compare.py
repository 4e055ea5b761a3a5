"""What vLLM's own processor sends to the engine for one image (mm_kwargs), against transformers'
processors called directly. No engine is started.  python t3_compare.py MODEL_DIR [mm_device_do_normalize]"""
import os, sys
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from t1_chat import image
from vllm.engine.arg_utils import EngineArgs
from vllm.multimodal import MULTIMODAL_REGISTRY

model = sys.argv[1]
dev_norm = None if len(sys.argv) < 3 else sys.argv[2] == "1"
kw = {} if dev_norm is None else {"mm_device_do_normalize": dev_norm}
mc = EngineArgs(model=model, max_model_len=2048, dtype="float32", limit_mm_per_prompt={"image": 2, "video": 0}, **kw).create_model_config()
print("mm_device_do_normalize resolved:", mc.multimodal_config.mm_device_do_normalize)
proc = MULTIMODAL_REGISTRY.create_processor(mc)
img = image(300, 200, 1)
from vllm.multimodal.processing import ProcessorInputs, TimingContext
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(model)
ids = tok.encode("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>hi<|im_end|>\n")
mm = proc.apply(ProcessorInputs(prompt=ids, mm_data_items=proc.info.parse_mm_data({"image": [img]})), TimingContext(enabled=False))
item = mm["mm_kwargs"]["image"][0]
pv_v = item["pixel_values"].data; thw_v = item["image_grid_thw"].data
print("vLLM sends: pixel_values", pv_v.dtype, tuple(pv_v.shape), "grid", thw_v.tolist(), "placeholders", mm["mm_placeholders"], "hash", mm["mm_hashes"])
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
for name, P in (("fast", Qwen2VLImageProcessor), ("pil", Qwen2VLImageProcessorPil)):
    for raw in (False, True):
        kw = {"do_rescale": False, "do_normalize": False} if raw else {}
        o = P.from_pretrained(model)(images=[img], return_tensors="pt", **kw)
        pv = o["pixel_values"]
        same_shape = tuple(pv.shape) == tuple(pv_v.shape)
        eq = same_shape and torch.equal(pv.to(pv_v.dtype), pv_v) if raw or pv.dtype == pv_v.dtype else False
        diff = (pv.float() - pv_v.float()).abs().max().item() if same_shape else None
        print(f"{name:4s} raw={raw!s:5s} dtype={pv.dtype} shape={tuple(pv.shape)} grid={o['image_grid_thw'].tolist()} equal_to_vllm={eq} maxabsdiff={diff}")
