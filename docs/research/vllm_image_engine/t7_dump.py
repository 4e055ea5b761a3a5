"""In an environment where vLLM's own processor runs (venvT): what vLLM's processor makes of the
t1_chat.py chats (prompt ids, mm_kwargs tensors, placeholders, hashes), saved for t8_gen.py.
    python t7_dump.py MODEL_DIR OUT_PT [engine-kwargs-json]"""
import json, os, sys
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from t1_chat import image
from transformers import AutoTokenizer
from vllm.engine.arg_utils import EngineArgs
from vllm.multimodal import MULTIMODAL_REGISTRY
from vllm.multimodal.processing import ProcessorInputs, TimingContext

model, out = sys.argv[1], sys.argv[2]
extra = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
args = dict(model=model, max_model_len=2048, dtype="float32", limit_mm_per_prompt={"image": 2})
args.update(extra)
mc = EngineArgs(**args).create_model_config()
proc = MULTIMODAL_REGISTRY.create_processor(mc)
tok = AutoTokenizer.from_pretrained(model)
dumps = []
for (w, h, seed) in [(300, 200, 1), (640, 480, 2), (300, 200, 1)]:
    img = image(w, h, seed)
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe the picture."}]}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    if not isinstance(ids, list):
        ids = ids["input_ids"]
    mm = proc.apply(ProcessorInputs(prompt=ids, mm_data_items=proc.info.parse_mm_data({"image": [img]})),
                    TimingContext(enabled=False))
    items = [{k: v.data for k, v in it.items()} for it in mm["mm_kwargs"]["image"]]
    phs = [(p.offset, p.length, p.is_embed) for p in mm["mm_placeholders"]["image"]]
    dumps.append({"prompt_token_ids": mm["prompt_token_ids"], "items": items, "placeholders": phs,
                  "hashes": mm["mm_hashes"]["image"]})
    print(w, h, "prompt_len", len(mm["prompt_token_ids"]), {k: (v.dtype, tuple(v.shape)) for k, v in items[0].items()},
          "ph", [(o, l, None if e is None else int(e.sum())) for o, l, e in phs])
torch.save(dumps, out)
