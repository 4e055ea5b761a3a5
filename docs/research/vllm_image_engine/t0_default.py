"""Baseline: vLLM LLM() on the tiny Qwen2-VL (h32) with default settings. Where does it fail?"""
import os, sys, time, traceback
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu"); os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
import json
extra = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
from vllm import LLM
t0 = time.time()
try:
    llm = LLM(model=sys.argv[1], max_model_len=2048, enforce_eager=True, dtype="float32", **extra)
    print("STARTED in", time.time() - t0)
except Exception:
    traceback.print_exc()
    print("FAILED after", time.time() - t0)
