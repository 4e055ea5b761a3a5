"""vLLM's own path: LLM.chat with one image on the tiny Qwen2-VL (needs a working HF processor).
    python t1_chat.py MODEL_DIR OUT_JSON [engine-kwargs-json]"""
import base64, io, json, os, sys, time
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu"); os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
import numpy as np
from PIL import Image


def image(w, h, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    return Image.fromarray(a)


def data_url(img):
    b = io.BytesIO(); img.save(b, format="PNG")
    return "data:image/png;base64," + base64.b64encode(b.getvalue()).decode()


def main():
    model, out = sys.argv[1], sys.argv[2]
    extra = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    from vllm import LLM, SamplingParams
    t0 = time.time()
    args = dict(max_model_len=2048, enforce_eager=True, dtype="float32",
                limit_mm_per_prompt={"image": 2, "video": 0})
    args.update(extra)
    llm = LLM(model=model, **args)
    t_start = time.time() - t0
    sp = SamplingParams(temperature=0, max_tokens=16)
    res = []
    for (w, h, seed) in [(300, 200, 1), (640, 480, 2), (300, 200, 1)]:
        msgs = [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(image(w, h, seed))}},
            {"type": "text", "text": "Describe the picture."}]}]
        t1 = time.time()
        o = llm.chat(msgs, sp, use_tqdm=False)[0]
        dt = time.time() - t1
        res.append({"size": [w, h], "seed": seed, "prompt_token_ids": o.prompt_token_ids,
                    "token_ids": list(o.outputs[0].token_ids), "text": o.outputs[0].text, "s": dt})
        print("chat", w, h, "prompt_len", len(o.prompt_token_ids), "ids", list(o.outputs[0].token_ids), f"{dt:.2f}s")
    json.dump({"startup_s": t_start, "results": res}, open(out, "w"))
    print("startup", t_start)


if __name__ == "__main__":
    main()
