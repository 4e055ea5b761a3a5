"""Tiny seeded Qwen2-VL with text head size 32 (vLLM CPU attention needs >= 32).

Reuses /work/main/model_builders/vlm_model.py's build() with a patched _config().
    build/peer-venv/bin/python /tmp/i25/build_qwen.py OUT_DIR
"""
import sys
sys.path.insert(0, "/work/main")
from pathlib import Path
import model_builders.vlm_model as vm


def _config():
    from transformers import Qwen2VLConfig
    return Qwen2VLConfig(
        text_config={
            "vocab_size": 151669,
            "hidden_size": 128,           # 4 heads x 32
            "intermediate_size": 256,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 4096,
            # head_dim 32 -> 16 rotary frequencies split over (t, h, w).
            "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]},
            "rope_theta": 1000000.0,
            "bos_token_id": 151643,
            "eos_token_id": 151645,
            "pad_token_id": 151643,
        },
        vision_config={
            "depth": 1,
            "embed_dim": 32,              # 2 heads x 16 (vision head 16)
            "hidden_size": 128,           # merger output = text hidden size
            "num_heads": 2,
            "mlp_ratio": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "in_channels": 3,
        },
        image_token_id=151655,
        video_token_id=151656,
        vision_start_token_id=151652,
        vision_end_token_id=151653,
        tie_word_embeddings=True,
        architectures=["Qwen2VLForConditionalGeneration"],
    )


vm._config = _config
out = Path(sys.argv[1])
print(vm.build(out, Path("/work/main/build/models/tokenizers/qwen3"), "qwen2_vl"))
