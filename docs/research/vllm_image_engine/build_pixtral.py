"""Tiny seeded Pixtral (Llava + Pixtral vision + Mistral text) with head size 32 everywhere.
    build/peer-venv/bin/python /tmp/i25/build_pixtral.py OUT_DIR"""
import sys
sys.path.insert(0, "/work/main")
from pathlib import Path
import model_builders.vlm_model as vm


def _pixtral_config():
    from transformers import LlavaConfig, MistralConfig, PixtralVisionConfig
    return LlavaConfig(
        vision_config=PixtralVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                          num_attention_heads=2, head_dim=32, patch_size=16,
                                          image_size=1024, num_channels=3),
        text_config=MistralConfig(vocab_size=131072, hidden_size=128, intermediate_size=256,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  head_dim=32, max_position_embeddings=4096, bos_token_id=1,
                                  eos_token_id=2, pad_token_id=11),
        image_token_index=10, projector_hidden_act="gelu", vision_feature_layer=-1,
        vision_feature_select_strategy="full", multimodal_projector_bias=True,
        tie_word_embeddings=True, architectures=["LlavaForConditionalGeneration"],
    )


vm._pixtral_config = _pixtral_config
print(vm.build(Path(sys.argv[1]), Path("/work/main/build/models/tokenizers/mistral-tekken-240911"), "pixtral"))
