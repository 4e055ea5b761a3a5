"""Build the tiny vision-language models the image path serves (default: Qwen2-VL).

No small vision-language weights exist on the package registries, so the model is a
``Qwen2VLForConditionalGeneration`` from a config (hidden 128, 2 text layers, vision depth 1),
every weight drawn from a seeded numpy generator in a fixed (sorted) parameter order: the bytes
are the same on every machine and torch version. It pairs with the offline Qwen3 tokenizer folder
(``<|vision_start|>`` 151652, ``<|image_pad|>`` 151655, ``<|vision_end|>`` 151653), which the
launcher builds in ``MODELS_DIR/tokenizers`` (``model_builders.reference_tokenizers``) and passes in, and
carries Qwen2-VL's ``preprocessor_config.json`` and chat template, so ``renderer.multimodal``
reads its image settings from the folder like from a real checkpoint.
It generates nonsense, through the real transformers classes. Every attention head is 32 wide:
vLLM's CPU attention takes head sizes of 32 and up, so vLLM's own engine can run these models too.

``max_pixels`` is lowered to 28*28*256 (at most 256 image tokens per image) so a CPU forward stays
fast; everything else is Qwen2-VL's published preprocessing.

``--family pixtral`` builds the other supported family the same way: a
``LlavaForConditionalGeneration`` with a Pixtral vision tower (patch 16, longest edge 1024) and a
Mistral text model, on the Tekken tokenizer folder (``[IMG]`` 10, ``[IMG_BREAK]`` 12,
``[IMG_END]`` 13), with pixtral-12b's ``preprocessor_config.json`` / ``processor_config.json``.

    python -m model_builders.vlm_model OUT_DIR [--family qwen2_vl|pixtral] [--tokenizer-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from model_builders.publish import exclusive

SEED = 20261203
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# Defaults for the command line and for callers that name no folder; the launcher always passes
# the folder it built (Settings.tokenizers_dir, inside MODELS_DIR).
TOKENIZERS_DIR = Path(__file__).resolve().parent.parent / "build" / "models" / "tokenizers"  # MODELS_DIR/tokenizers
DEFAULT_TOKENIZER_DIR = TOKENIZERS_DIR / "qwen3"
PIXTRAL_TOKENIZER_DIR = TOKENIZERS_DIR / "mistral-tekken-240911"
# Each family's tokenizer, by its key in what model_builders.reference_tokenizers.build returns.
TOKENIZER_OF_FAMILY = {"qwen2_vl": "qwen3", "pixtral": "mistral"}

# Qwen2-VL-*-Instruct's template, verbatim in behaviour: each image part becomes
# <|vision_start|><|image_pad|><|vision_end|>, the placeholder renderer.multimodal expands.
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

MAX_PIXELS = 28 * 28 * 256
# Both families' published processors: bicubic resize, rescale to [0, 1], CLIP normalization.
_COMMON_PREPROCESSING = {
    "do_resize": True,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "do_convert_rgb": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "resample": 3,
}
PREPROCESSOR_CONFIG = {
    "image_processor_type": "Qwen2VLImageProcessor",
    **_COMMON_PREPROCESSING,
    "min_pixels": 56 * 56,
    "max_pixels": MAX_PIXELS,
    "size": {"shortest_edge": 56 * 56, "longest_edge": MAX_PIXELS},
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
}


PIXTRAL_PREPROCESSOR_CONFIG = {
    "image_processor_type": "PixtralImageProcessor",
    "processor_class": "PixtralProcessor",
    **_COMMON_PREPROCESSING,
    "patch_size": {"height": 16, "width": 16},
    "size": {"longest_edge": 1024},
}
PIXTRAL_PROCESSOR_CONFIG = {
    "processor_class": "PixtralProcessor",
    "patch_size": 16,
    "spatial_merge_size": 1,
    "image_token": "[IMG]",
    "image_break_token": "[IMG_BREAK]",
    "image_end_token": "[IMG_END]",
}


def _pixtral_config():  # noqa: ANN202
    from transformers import LlavaConfig, MistralConfig, PixtralVisionConfig

    return LlavaConfig(
        vision_config=PixtralVisionConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=1,
            num_attention_heads=2,
            head_dim=32,
            patch_size=16,
            image_size=1024,
            num_channels=3,
        ),
        text_config=MistralConfig(
            vocab_size=131072,
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            max_position_embeddings=4096,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=11,
        ),
        image_token_index=10,
        projector_hidden_act="gelu",
        vision_feature_layer=-1,
        vision_feature_select_strategy="full",
        multimodal_projector_bias=True,
        tie_word_embeddings=True,
        architectures=["LlavaForConditionalGeneration"],
    )


def _config():  # noqa: ANN202 - transformers type, imported lazily
    from transformers import Qwen2VLConfig

    return Qwen2VLConfig(
        text_config={
            "vocab_size": 151669,
            "hidden_size": 128,
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
            "embed_dim": 64,
            "hidden_size": 128,  # the merger's output: the text model's hidden size
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


# Written into every folder this builds; a folder from another layout (the head size 16 of
# before) is rebuilt rather than served.
BUILD_MARKER = ".vlm_build"
BUILD_VERSION = "2: attention heads 32 wide"


def is_built(out_dir: Path) -> bool:
    """Whether ``out_dir`` holds a complete model folder of this layout (``build`` publishes it
    atomically)."""
    out_dir = Path(out_dir)
    marker = out_dir / BUILD_MARKER
    return (
        (out_dir / "model.safetensors").exists()
        and marker.exists()
        and marker.read_text(encoding="utf-8").strip() == BUILD_VERSION
    )


def build(out_dir: Path, tokenizer_dir: Path | None = None, family: str = "qwen2_vl") -> Path:
    """Write the model folder (idempotent: an existing complete folder is kept as is; other
    builders of it wait, then keep it).

    ``tokenizer_dir``: the family's tokenizer folder; None takes the one under ``build/models/tokenizers``.
    """
    with exclusive(Path(out_dir)):
        return _build(Path(out_dir), tokenizer_dir, family)


def _build(out_dir: Path, tokenizer_dir: Path | None, family: str) -> Path:
    if is_built(out_dir):
        return out_dir
    if family not in ("qwen2_vl", "pixtral"):
        raise ValueError(f"family must be 'qwen2_vl' or 'pixtral', got {family!r}")
    import numpy as np
    import torch
    from transformers import LlavaForConditionalGeneration, Qwen2VLForConditionalGeneration

    torch.manual_seed(0)  # only for init we overwrite; keeps a failed overwrite deterministic too
    if family == "pixtral":
        tokenizer_dir = tokenizer_dir or PIXTRAL_TOKENIZER_DIR
        model = LlavaForConditionalGeneration(_pixtral_config())
    else:
        tokenizer_dir = tokenizer_dir or DEFAULT_TOKENIZER_DIR
        model = Qwen2VLForConditionalGeneration(_config())
    rng = np.random.default_rng(SEED)
    state = {}
    for name, param in sorted(model.state_dict().items()):
        if name == "lm_head.weight":  # tied to the embeddings
            continue
        if name.endswith("bias"):
            value = np.zeros(param.shape)
        elif "norm" in name or "ln_" in name:
            value = np.ones(param.shape)
        else:
            value = rng.standard_normal(param.shape) * 0.05
        state[name] = torch.from_numpy(value.astype(np.float32))
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    model.tie_weights()

    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    for f in TOKENIZER_FILES:
        shutil.copy2(tokenizer_dir / f, tmp / f)
    (tmp / "generation_config.json").unlink(missing_ok=True)  # carries a version string: not byte-stable
    (tmp / BUILD_MARKER).write_text(BUILD_VERSION + "\n", encoding="utf-8")
    if family == "pixtral":
        shutil.copy2(tokenizer_dir / "chat_template.jinja", tmp / "chat_template.jinja")
        (tmp / "preprocessor_config.json").write_text(json.dumps(PIXTRAL_PREPROCESSOR_CONFIG, indent=2) + "\n")
        (tmp / "processor_config.json").write_text(json.dumps(PIXTRAL_PROCESSOR_CONFIG, indent=2) + "\n")
        shutil.rmtree(out_dir, ignore_errors=True)
        tmp.rename(out_dir)
        return out_dir
    # The Qwen3 text template would win over ours in the tokenizer config: drop it there.
    tok_cfg = json.loads((tmp / "tokenizer_config.json").read_text(encoding="utf-8"))
    tok_cfg.pop("chat_template", None)
    (tmp / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2, ensure_ascii=False) + "\n")
    (tmp / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    (tmp / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR_CONFIG, indent=2) + "\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--family", choices=("qwen2_vl", "pixtral"), default="qwen2_vl")
    ap.add_argument(
        "--tokenizer-dir",
        type=Path,
        default=None,
        help="tokenizer folder (default: build/models/tokenizers/qwen3, or mistral-tekken-240911 for pixtral)",
    )
    a = ap.parse_args(argv)
    print(build(a.out_dir, a.tokenizer_dir, a.family))
    return 0


if __name__ == "__main__":
    sys.exit(main())
