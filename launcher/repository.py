"""What tritonserver loads: the model folders built (the default model, the tiny vision-language
and encoder-decoder models) and ``model_repository/`` rendered into the build folder, every
``${var}`` of its config templates filled from the ``Settings``, every Python model's tensors
(``${tensors}``) written from ``renderer/stage_tensors.py`` and its parameters (``${parameters}``)
from ``renderer/stage_params.py``.
"""

from __future__ import annotations

import os
import re
import shutil
import string
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.settings import ENCODER_DECODER_MODELS, ENGINES, ROOT, TEMPLATES, Settings, gpu_visible

if TYPE_CHECKING:
    from renderer.engine_tensors import TensorSpec


def model_family(s: Settings) -> str | None:
    """The image-processor family of the served model, or None for a text-only model."""
    from renderer.multimodal.registry import detect_family

    return detect_family(s.resolved_model_dir)


def mm_instance_kind(s: Settings) -> str:
    """``mm_process``'s instance kind: ``MM_INSTANCE_KIND``, or for auto the GPU where one is visible."""
    if s.mm_instance_kind != "auto":
        return s.mm_instance_kind
    return "KIND_GPU" if gpu_visible() else "KIND_CPU"


def template_vars(s: Settings, family: str | None = None) -> dict[str, str]:
    """Every ``${var}`` of the config templates: what the repository's shape takes from the settings
    (instance counts, batching, the engine's transaction policy, ``mm_process``'s device kind), the
    family's tensors (``family_vars``), and each stage parameter's text (``parameter_values``) under
    its value's name, from which ``render_config`` writes the ``${parameters}`` lines."""
    kind = mm_instance_kind(s)
    return {
        "tokenize_instances": str(s.resolved_tokenize_instances),
        "chat_render_instances": str(s.resolved_chat_render_instances),
        "llm_instances": str(s.llm_instances),
        "llm_decoupled": "true" if s.llm_decoupled else "false",
        "max_batch_size": str(s.max_batch_size),
        "max_queue_delay_us": str(s.max_queue_delay_us),
        "mm_instance_kind": kind,
        "mm_gpus": "gpus: [ 0 ]" if kind == "KIND_GPU" else "",
        **parameter_values(s, family),
        **family_vars(family, raw_pixels_of(s, family)),
    }


def raw_pixels_of(s: Settings, family: str | None) -> bool:
    """Whether the served family's ``pixel_values`` are uint8 (``MM_DEVICE_DO_NORMALIZE``, for a
    family whose vLLM model normalizes on the device: ``renderer/multimodal/tensors.py``)."""
    from renderer.multimodal.tensors import raw_pixels

    return bool(family) and raw_pixels(family, s.mm_device_do_normalize)


def computed_values(s: Settings, family: str | None) -> dict[str, object]:
    """The stage parameters' values that are no attribute of the settings
    (``renderer.stage_params.COMPUTED``): worked out from them, the host and the served model."""
    from renderer.multimodal.devices import resolve_image_device

    return {
        "tokenizer_record": tokenizer_record_dir(s),
        "engine_model": engine_model_name(s),
        "engine_decoupled": engine_decoupled(s),
        "vllm_device": "cuda" if gpu_visible() else "cpu",
        "resolved_vllm_dtype": s.vllm_dtype if s.vllm_dtype != "auto" else ("auto" if gpu_visible() else "float32"),
        "mm_device": resolve_image_device(s.image_device, mm_instance_kind(s)),
        "family": family or "",
        "project_root": ROOT,
    }


def parameter_values(s: Settings, family: str | None = None) -> dict[str, str]:
    """Each stage parameter's text (``renderer/stage_params.py``), by its value's name: a computed
    value (``computed_values``) or the settings' attribute, written by the entry's ``text``."""
    from renderer.stage_params import STAGE_PARAMS

    computed = computed_values(s, family)
    out: dict[str, str] = {}
    for p in STAGE_PARAMS:
        if p.literal is None:
            name = p.value_name
            out[name] = p.text(computed[name] if name in computed else getattr(s, name))
    return out


def parameter_lines(model: str, variant: str, values: dict[str, str]) -> str | None:
    """``model``'s ``parameters { ... }`` lines (what its template's ``${parameters}`` becomes) for its
    ``config.<variant>.pbtxt`` (``""``: ``config.pbtxt``), each ``doc`` as ``#`` lines above it; None
    for a model that carries none."""
    from renderer.stage_params import stage_params

    params = stage_params(model, variant)
    if not params:
        return None
    lines: list[str] = []
    for p in params:
        for paragraph in p.doc.splitlines():
            lines += textwrap.wrap(paragraph, _COMMENT_WIDTH, initial_indent="# ", subsequent_indent="# ")
        value = p.literal if p.literal is not None else values[p.value_name]
        lines.append(f'parameters {{ key: "{p.key}" value: {{ string_value: "{value}" }} }}')
    return "\n".join(lines)


def family_vars(family: str | None, raw: bool = False) -> dict[str, str]:
    """What makes one ensemble's ``config.multimodal.pbtxt`` fit each image family: the family's
    image tensors (``renderer/multimodal/tensors.py``) as ensemble outputs and step maps (the Python
    models' take theirs from ``tensor_blocks``). Empty for a text-only model (None)."""
    from renderer.multimodal.tensors import engine_image_inputs, image_tensors

    specs = image_tensors(family, raw) if family else ()
    engine = engine_image_inputs(family) if family else ()
    return {
        "family": family or "",
        "image_outputs": ",\n".join(f"  {tensor_entry(t)}" for t in specs),
        "image_step_outputs": "\n".join(f'      output_map {{ key: "{t.name}" value: "{t.name}" }}' for t in specs),
        "engine_image_step_outputs": "\n".join(f'      output_map {{ key: "{n}" value: "_{n}" }}' for n in engine),
        "engine_image_step_inputs": "\n".join(f'      input_map {{ key: "{n}" value: "_{n}" }}' for n in engine),
    }


def tensor_entry(t: TensorSpec) -> str:
    """One tensor as a config's ``input``/``output`` entry."""
    flags = (" optional: true" if t.optional else "") + (" allow_ragged_batch: true" if t.ragged else "")
    return f'{{ name: "{t.name}" data_type: {t.dtype} dims: [ {", ".join(map(str, t.dims))} ]{flags} }}'


# Comment lines wrap here, as the hand-written configs did.
_COMMENT_WIDTH = 100


def tensor_blocks(model: str, family: str | None, raw: bool = False) -> str | None:
    """``model``'s ``input [...]`` and ``output [...]`` blocks from ``renderer/stage_tensors.py``
    (what its template's ``${tensors}`` becomes), each tensor's ``doc`` as ``#`` lines above it;
    None for a model without a stage table (an ensemble: its blocks are written by hand)."""
    from renderer.stage_tensors import has_stage_tensors, stage_tensors

    if not has_stage_tensors(model, family):
        return None
    tables = stage_tensors(model, family, raw)

    def block(kind: str, specs: tuple[TensorSpec, ...]) -> str:
        lines = [f"{kind} ["]
        for i, t in enumerate(specs):
            for paragraph in t.doc.splitlines():
                lines += textwrap.wrap(
                    paragraph, _COMMENT_WIDTH, initial_indent="  # ", subsequent_indent="  # ", break_on_hyphens=False
                )
            lines.append(f"  {tensor_entry(t)}{',' if i < len(specs) - 1 else ''}")
        return "\n".join([*lines, "]"])

    return f"{block('input', tables.inputs)}\n{block('output', tables.outputs)}"


def engine_model_name(s: Settings) -> str:
    """The model the post-processing stage sends generation requests to."""
    return Path(s.engine_model_dir).name if s.engine_model_dir else "llm"


def engine_decoupled(s: Settings) -> bool:
    """Whether the engine sends many responses per request: ``llm`` as ``LLM_DECOUPLED`` says, a
    TensorRT-LLM engine folder as its config says (its ``decoupled_mode``)."""
    if not s.engine_model_dir:
        return s.llm_decoupled
    config = (Path(s.engine_model_dir) / "config.pbtxt").read_text()
    policy = re.search(r"model_transaction_policy\s*\{[^}]*decoupled\s*:\s*(\w+)", config)
    return bool(policy) and policy.group(1).lower() == "true"


def pick_config(model: Path, family: str | None) -> Path | None:
    """A model folder's config for the served model's family.

    ``config.<family>.pbtxt``, then ``config.multimodal.pbtxt`` (any image family, filled with
    ``family_vars``), then ``config.pbtxt`` (the text-only form); a folder without
    ``config.pbtxt`` (``mm_process``) exists only for image families.
    """
    names = [f"config.{family}.pbtxt", "config.multimodal.pbtxt"] if family else []
    for name in names + ["config.pbtxt"]:
        if (model / name).exists():
            return model / name
    return None


def render_repository(s: Settings, family: str | None = None) -> Path:
    """Copy ``model_repository/`` into the build folder with every ``${var}`` filled."""
    values = template_vars(s, family)
    raw = raw_pixels_of(s, family)
    out = s.repository
    if out.exists():
        shutil.rmtree(out)
    for model in sorted(p for p in TEMPLATES.iterdir() if p.is_dir()):
        if model.name == "llm" and s.engine_model_dir:
            continue  # the user's engine folder takes its place (below)
        if model.name in ENCODER_DECODER_MODELS and not s.serves_encoder_decoder:
            continue
        chosen = pick_config(model, family)
        if model.name == "llm":
            chosen = model / ENGINES[s.llm_engine].config
        if chosen is None:
            continue
        dst = out / model.name
        shutil.copytree(model, dst, ignore=shutil.ignore_patterns("__pycache__", "config.*.pbtxt"))
        # Ensembles have no files in their version folder, and git keeps no empty folders.
        (dst / "1").mkdir(exist_ok=True)
        (dst / "config.pbtxt").write_text(render_config(chosen, model.name, values, family, raw))
    if s.engine_model_dir:
        # Linked, not copied: an engine folder may be large; Triton follows the link.
        (out / engine_model_name(s)).symlink_to(Path(s.engine_model_dir).resolve(), target_is_directory=True)
    return out


def render_config(template: Path, model: str, values: dict[str, str], family: str | None, raw: bool = False) -> str:
    """One config template filled: ``values`` (``template_vars``) and, for a Python model, its
    tensors (``tensor_blocks``; ``raw``: ``raw_pixels_of``) and its parameters (``parameter_lines``)."""
    text = template.read_text()
    tensors = tensor_blocks(model, family, raw)
    if tensors is not None and "${tensors}" not in text:
        # A stage's tensors come from its table only; a template without the placeholder would
        # load with none (or with a hand-written copy that the table no longer governs).
        raise ValueError(f"{template} declares no ${{tensors}}: a Python model's tensors come from its stage table")
    variant = template.name.removeprefix("config").removesuffix(".pbtxt").removeprefix(".")
    parameters = parameter_lines(model, variant, values)
    if parameters is not None and "${parameters}" not in text:
        raise ValueError(
            f"{template} declares no ${{parameters}}: a stage's parameters come from renderer/stage_params.py"
        )
    # substitute() (not safe_substitute) so a misspelt placeholder fails here, loudly.
    return string.Template(text).substitute({**values, "tensors": tensors or "", "parameters": parameters or ""})


# Models that a BLS call reaches, which loading an ensemble does not load by itself.
BLS_CALLEES = {"detokenize": "engine", "detokenize_enc_dec": "llm_enc_dec"}


GENERATION_ENSEMBLES = {
    "completion": "detokenize",
    "chat": "detokenize",
    "ensemble": "detokenize",
    "encoder_decoder_completion": "detokenize_enc_dec",
}


def models_to_load(s: Settings) -> list[str]:
    """``MODELS`` plus the engine each generation ensemble reaches through BLS; all when unset."""
    models = [m.strip() for m in s.models.split(",") if m.strip()]
    if not models:
        return ["*"]
    out = list(models)
    for m in models:
        post = GENERATION_ENSEMBLES.get(m, m if m in BLS_CALLEES else None)
        if post:
            callee = BLS_CALLEES[post]
            out.append(engine_model_name(s) if callee == "engine" else callee)
    return list(dict.fromkeys(out))


def python_models(s: Settings) -> frozenset[str]:
    """The Python-backend models of the rendered repository (the ones with stubs)."""
    return frozenset(p.parent.name for p in s.repository.glob("*/config.pbtxt") if 'backend: "python"' in p.read_text())


def prepare(s: Settings) -> None:
    """Build what the settings serve (unless the user's) and render the repository; a setting that
    cannot work is a ``SystemExit`` naming it."""
    from model_builders import default_model, seq2seq_model

    default_tokenizer = Path(s.models_dir) / "smollm2-135m-instruct"
    if not s.model_dir and s.model != "smollm2":
        build_vlm(s)
    elif not s.model_dir:
        default_model.build(s.resolved_model_dir)
    elif not (s.resolved_model_dir / "config.json").exists():
        raise SystemExit(f"MODEL_DIR={s.model_dir} holds no config.json (not a Hugging Face model folder)")
    check_image_devices(s)
    engine = ENGINES.get(s.llm_engine)
    if engine is None:
        raise SystemExit(f"LLM_ENGINE={s.llm_engine} is not an engine here; choose {' or '.join(ENGINES)}")
    if s.engine_model_dir and not (Path(s.engine_model_dir) / "config.pbtxt").exists():
        raise SystemExit(f"ENGINE_MODEL_DIR={s.engine_model_dir} holds no config.pbtxt (not a Triton model folder)")
    if engine.decoupled_only and not s.llm_decoupled:
        served = " or ".join(n for n, e in ENGINES.items() if not e.decoupled_only)
        raise SystemExit(f"LLM_DECOUPLED=0 is served by {served} only; LLM_ENGINE={s.llm_engine} is decoupled")
    if engine.environment and not (Path(s.vllm_env) / "bin" / "activate").exists():
        raise SystemExit(f"LLM_ENGINE={s.llm_engine} needs vLLM's environment at {s.vllm_env}: run `make engine-vllm`")
    if s.llm_engine == "vllm" and model_family(s) is not None:
        check_vllm_images(s)
    if s.serves_encoder_decoder and not s.encoder_decoder_model_dir:
        # The tiny BART borrows the default model's tokenizer.
        seq2seq_model.build(s.resolved_encdec_model_dir, default_model.build(default_tokenizer))
    record_tokenizer(s)
    render_repository(s, model_family(s))


def check_image_devices(s: Settings) -> None:
    """``IMAGE_DEVICE`` and ``IMAGE_DECODE_DEVICE`` checked before anything starts (the rest of
    what they need, torchvision for decoding on the device, ``mm_process`` checks as it loads)."""
    from renderer.errors import ImageDeviceError
    from renderer.multimodal.devices import check_decode_setting, resolve_image_device

    try:
        check_decode_setting(s.image_decode_device, resolve_image_device(s.image_device, mm_instance_kind(s)))
    except ImageDeviceError as e:
        raise SystemExit(str(e)) from None


def tokenizer_record_dir(s: Settings) -> Path:
    """Where the served model's tokenizer record lives: beside the built models, named by the
    model folder's fingerprint (so every build folder and every copy of the same files share one
    record, and an image that builds its models carries it), unless that folder cannot be
    written and holds no current record (a read-only image serving another model): then in the
    build folder."""
    return _record_dir_and_fingerprint(s)[0]


def _record_dir_and_fingerprint(s: Settings) -> tuple[Path, str]:
    """``tokenizer_record_dir`` and the model folder's fingerprint, read once."""
    from renderer import light_tokenizer

    print_ = light_tokenizer.fingerprint(s.resolved_model_dir)
    shared = Path(s.models_dir) / "tokenizer_records" / print_[:24]
    if light_tokenizer.is_current(shared, s.resolved_model_dir, print_):
        return shared, print_
    existing = next(p for p in (shared, *shared.parents) if p.exists())
    return (shared if os.access(existing, os.W_OK) else s.build / "tokenizer_record"), print_


def record_tokenizer(s: Settings) -> None:
    """Record the served model's tokenizer for the stubs (``renderer/light_tokenizer.py``), in a
    process of its own so that the launcher never imports transformers; kept while the model
    folder and transformers are unchanged. An unproven record is kept too: the stubs then load
    transformers and log the record's reason."""
    from renderer import light_tokenizer

    out, print_ = _record_dir_and_fingerprint(s)
    if light_tokenizer.is_current(out, s.resolved_model_dir, print_):
        return
    subprocess.run(
        [sys.executable, "-c", light_tokenizer.BUILD_COMMAND, str(s.resolved_model_dir), str(out)],
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        check=True,
    )


def check_vllm_images(s: Settings) -> None:
    """vLLM 0.32 cannot import its vision-language models without torchvision: an engine
    environment built before it served images is refused here, naming the target that upgrades it."""
    from model_builders import vllm_env

    error = vllm_env.torchvision_error(Path(s.vllm_env) / "bin" / "python")
    if error:
        raise SystemExit(
            f"LLM_ENGINE=vllm with an image model needs torchvision in vLLM's environment {s.vllm_env} "
            f"({error}): run `make engine-vllm`, which installs it"
        )


def build_vlm(s: Settings) -> Path:
    """The built-in vision-language model ``s.model`` names, on the tokenizer folders built in
    ``s.tokenizers_dir`` (only when the model itself is still to be built)."""
    from model_builders import vlm_model

    family = s.model.replace("-", "_")
    if vlm_model.is_built(s.resolved_model_dir):
        return s.resolved_model_dir
    from model_builders import reference_tokenizers

    tokenizers = reference_tokenizers.build(s.tokenizers_dir)
    return vlm_model.build(s.resolved_model_dir, tokenizers[vlm_model.TOKENIZER_OF_FAMILY[family]], family=family)
