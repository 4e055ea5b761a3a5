"""AsyncLLM.generate from MultiModalInput built from t7_dump.py's tensors (what vLLM's processor
made, standing in for mm_process), in any environment; compares with t1_chat.py's LLM.chat ids.
    [PYTHONPATH=/tmp/i25/plugin] python t8_gen.py MODEL DUMP_PT CHAT_JSON OUT_JSON qwen2_vl|pixtral [engine-json]"""
import asyncio, json, os, sys, time
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def mm_kwargs_for(family, items):
    import torch
    from transformers import BatchFeature
    from vllm.multimodal.inputs import MultiModalFieldConfig, MultiModalKwargsItems
    if family == "qwen2_vl":   # = qwen2_vl.py:761 _create_qwen2vl_field_factory
        pv = torch.cat([it["pixel_values"] for it in items]); thw = torch.stack([it["image_grid_thw"] for it in items])
        cfg = {"pixel_values": MultiModalFieldConfig.flat_from_sizes("image", thw.prod(-1)),
               "image_grid_thw": MultiModalFieldConfig.batched("image", keep_on_cpu=True)}
        bf = BatchFeature({"pixel_values": pv, "image_grid_thw": thw})
    else:                      # = llava.py PixtralHFMultiModalProcessor._get_mm_fields_config
        cfg = {"pixel_values": MultiModalFieldConfig.batched("image")}
        bf = BatchFeature({"pixel_values": [it["pixel_values"] for it in items]})
    return MultiModalKwargsItems.from_hf_inputs(bf, cfg)


async def main():
    model, dump, chat_json, out, family = sys.argv[1:6]
    extra = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
    import torch
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.inputs.engine import mm_input
    from vllm.multimodal.inputs import PlaceholderRange
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine.async_llm import AsyncLLM
    dumps = torch.load(dump, weights_only=False)
    ref = json.load(open(chat_json))["results"]
    args = dict(model=model, max_model_len=2048, enforce_eager=True, dtype="float32",
                limit_mm_per_prompt={"image": 2, "video": 0} if family == "qwen2_vl" else {"image": 2},
                disable_log_stats=True)
    args.update(extra)
    t0 = time.time()
    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**args))
    t_start = time.time() - t0
    print("STARTED", f"{t_start:.1f}s", args, flush=True)
    res = []
    try:
        for n, (d, r) in enumerate(zip(dumps, ref)):
            assert d["prompt_token_ids"] == r["prompt_token_ids"], "prompt ids differ from LLM.chat's"
            phs = [PlaceholderRange(offset=o, length=l, is_embed=e) for o, l, e in d["placeholders"]]
            inp = mm_input(d["prompt_token_ids"], mm_kwargs_for(family, d["items"]), {"image": d["hashes"]}, {"image": phs})
            t1 = time.time()
            final = None
            async for o in engine.generate(inp, SamplingParams(temperature=0, max_tokens=16), request_id=f"r{n}"):
                final = o
            dt = time.time() - t1
            got = list(final.outputs[0].token_ids)
            print("gen", n, "ids", got[:6], "... equal_to_chat", got == r["token_ids"], f"{dt:.3f}s", flush=True)
            res.append({"token_ids": got, "equal": got == r["token_ids"], "s": dt})
    finally:
        engine.shutdown()
    json.dump({"startup_s": t_start, "args": args, "results": res}, open(out, "w"), default=str)


if __name__ == "__main__":
    asyncio.run(main())
