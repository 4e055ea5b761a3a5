"""Does a repeated mm_hash skip vLLM's vision encoder? Everything in one process
(VLLM_ENABLE_V1_MULTIPROCESSING=0, distributed_executor_backend="uni"), prefix caching off so only
the encoder cache can help; counts calls of the model's embed_multimodal.
    PYTHONPATH=/tmp/i25/plugin build/peer-venv/bin/python t9_encoder_cache.py MODEL DUMP_PT"""
import os, sys, time
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    import torch
    from vllm.engine.arg_utils import EngineArgs
    from vllm.inputs.engine import mm_input
    from vllm.multimodal.inputs import PlaceholderRange
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine.llm_engine import LLMEngine
    from t8_gen import mm_kwargs_for
    model, dump = sys.argv[1], sys.argv[2]
    dumps = torch.load(dump, weights_only=False)
    eng = LLMEngine.from_engine_args(EngineArgs(
        model=model, max_model_len=2048, enforce_eager=True, dtype="float32",
        limit_mm_per_prompt={"image": 2, "video": 0}, enable_prefix_caching=False,
        distributed_executor_backend="uni", disable_log_stats=True))
    core = eng.engine_core.engine_core
    m = core.model_executor.driver_worker.worker.model_runner.model
    calls = []
    orig = m.embed_multimodal
    def counted(**kw):
        calls.append({k: tuple(v.shape) for k, v in kw.items() if hasattr(v, "shape")})
        return orig(**kw)
    m.embed_multimodal = counted
    # A: image 1; B: image 1 again with a different question (same mm_hash); C: image 2
    plan = [("A img1", dumps[0], 0), ("B img1 other text", dumps[0], 1), ("C img2", dumps[1], 0)]
    for name, d, variant in plan:
        ids = list(d["prompt_token_ids"])
        if variant:  # change the last text tokens before the assistant turn: prompt differs after the image
            ids[-6] = ids[-6] + 1
        phs = [PlaceholderRange(offset=o, length=l, is_embed=e) for o, l, e in d["placeholders"]]
        inp = mm_input(ids, mm_kwargs_for("qwen2_vl", d["items"]), {"image": d["hashes"]}, {"image": phs})
        n0 = len(calls); t = time.time()
        eng.add_request(name, inp, SamplingParams(temperature=0, max_tokens=4))
        while eng.has_unfinished_requests():
            eng.step()
        print(f"{name}: encoder calls {len(calls) - n0} {calls[n0:]} {time.time() - t:.3f}s", flush=True)


if __name__ == "__main__":
    main()
