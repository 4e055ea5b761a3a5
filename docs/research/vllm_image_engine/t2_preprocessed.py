"""vLLM AsyncLLM.generate with an already-processed image: MultiModalInput(mm_kwargs, mm_hashes,
mm_placeholders), tensors from transformers' image processor, never vLLM's processor.
    python t2_preprocessed.py MODEL_DIR CHAT_JSON OUT_JSON [pil|fast] [engine-kwargs-json]
CHAT_JSON: t1_chat.py's output (prompt ids with placeholders expanded, greedy ids to compare)."""
import asyncio, hashlib, json, os, sys, time
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu"); os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from t1_chat import image  # same seeded images

IMAGE_PAD = 151655


def processed(img, kind, model):
    import torch
    if kind.startswith("saved"):  # saved_raw / saved_norm: tensors written by a run with torchvision
        d = torch.load(f"/tmp/i25/out/tensors_{img.size[0]}x{img.size[1]}_{kind[6:]}.pt")
        return d["pixel_values"], d["image_grid_thw"]
    raw = kind.endswith("_raw")
    kw = {"do_rescale": False, "do_normalize": False} if raw else {}
    if kind.startswith("fast"):
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor as P
    else:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil as P
    proc = P.from_pretrained(model)
    out = proc(images=[img], return_tensors="pt", **kw)
    torch.save({"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]},
               f"/tmp/i25/out/tensors_{img.size[0]}x{img.size[1]}_{'raw' if raw else 'norm'}.pt")
    return out["pixel_values"], out["image_grid_thw"]


def mm_kwargs_for(pixel_values, grid_thw, merge=2):
    """What Qwen2VLMultiModalProcessor._get_mm_fields_config builds, without importing the model module."""
    from transformers import BatchFeature
    from vllm.multimodal.inputs import MultiModalFieldConfig, MultiModalKwargsItems
    sizes = grid_thw.prod(-1)
    cfg = {
        "pixel_values": MultiModalFieldConfig.flat_from_sizes("image", sizes),
        "image_grid_thw": MultiModalFieldConfig.batched("image", keep_on_cpu=True),
    }
    return MultiModalKwargsItems.from_hf_inputs(
        BatchFeature({"pixel_values": pixel_values, "image_grid_thw": grid_thw}), cfg)


def placeholders(ids):
    from vllm.multimodal.inputs import PlaceholderRange
    out, i = [], 0
    while i < len(ids):
        if ids[i] == IMAGE_PAD:
            j = i
            while j < len(ids) and ids[j] == IMAGE_PAD:
                j += 1
            out.append(PlaceholderRange(offset=i, length=j - i))
            i = j
        else:
            i += 1
    return out


async def main():
    model, chat_json, out = sys.argv[1], sys.argv[2], sys.argv[3]
    kind = sys.argv[4] if len(sys.argv) > 4 else "pil"
    extra = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    ref = json.load(open(chat_json))["results"]
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.inputs.engine import mm_input
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine.async_llm import AsyncLLM
    t0 = time.time()
    args = dict(model=model, max_model_len=2048, enforce_eager=True, dtype="float32",
                limit_mm_per_prompt={"image": 2, "video": 0}, disable_log_stats=True)
    args.update(extra)
    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**args))
    t_start = time.time() - t0
    print("STARTED", f"{t_start:.1f}s", args, flush=True)
    res = []
    try:
        for n, r in enumerate(ref):
            w, h = r["size"]
            img = image(w, h, r["seed"])
            pv, thw = processed(img, kind, model)
            ids = r["prompt_token_ids"]
            ph = placeholders(ids)
            assert len(ph) == 1 and ph[0].length == int(thw.prod()) // 4, (ph, thw)
            h_ = hashlib.sha256(img.tobytes() + repr(img.size).encode()).hexdigest()
            inp = mm_input(ids, mm_kwargs_for(pv, thw), {"image": [h_]}, {"image": ph})
            sp = SamplingParams(temperature=0, max_tokens=16)
            t1 = time.time()
            final = None
            async for o in engine.generate(inp, sp, request_id=f"r{n}"):
                final = o
            dt = time.time() - t1
            got = list(final.outputs[0].token_ids)
            print("gen", w, h, kind, "ids", got, "equal_to_chat", got == r["token_ids"], f"{dt:.3f}s", flush=True)
            res.append({"size": [w, h], "token_ids": got, "equal": got == r["token_ids"], "s": dt})
    finally:
        engine.shutdown()
    json.dump({"startup_s": t_start, "args": args, "kind": kind, "results": res}, open(out, "w"), default=str)


if __name__ == "__main__":
    asyncio.run(main())
