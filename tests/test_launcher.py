"""The launcher: templates filled, settings from the environment, clean start and stop."""

from __future__ import annotations

import glob
import os
from dataclasses import replace
from pathlib import Path

import pytest

from serving import launch


def test_every_placeholder_is_filled(tmp_path, model_dir):
    s = replace(launch.Settings(), build_dir=str(tmp_path), model_dir=str(model_dir), tokenize_instances=3,
                max_batch_size=17, max_queue_delay_us=123)
    repo = launch.render_repository(s)
    configs = {p.parent.name: p.read_text() for p in repo.glob("*/config.pbtxt")}
    assert {"tokenize", "llm", "detokenize", "render_completion", "completion", "generation_params",
            "tokenize_enc_dec", "llm_enc_dec", "render_encoder_decoder", "encoder_decoder_completion"} <= set(configs)
    for name, text in configs.items():
        assert "${" not in text, name
        assert "max_batch_size: 17" in text, name
    assert "count: 3 kind: KIND_CPU" in configs["tokenize"]
    assert "max_queue_delay_microseconds: 123" in configs["tokenize"]
    assert f'string_value: "{model_dir}"' in configs["tokenize"]
    assert f'string_value: "{s.resolved_encdec_model_dir}"' in configs["llm_enc_dec"]
    assert (repo / "tokenize" / "1" / "model.py").exists()


def test_a_misspelt_placeholder_fails_loudly(tmp_path, monkeypatch):
    templates = tmp_path / "templates"
    (templates / "m" / "1").mkdir(parents=True)
    (templates / "m" / "config.pbtxt").write_text('name: "m"\nmax_batch_size: ${max_batch_sise}\n')
    monkeypatch.setattr(launch, "TEMPLATES", templates)
    with pytest.raises(KeyError, match="max_batch_sise"):
        launch.render_repository(replace(launch.Settings(), build_dir=str(tmp_path / "b")))


def test_settings_from_environment(monkeypatch):
    monkeypatch.setenv("HTTP_PORT", "9100")
    monkeypatch.setenv("ENABLE_PROMPT_EMBEDS", "true")
    monkeypatch.setenv("MODEL_DIR", "/models/x")
    s = launch.Settings.from_env()
    assert (s.http_port, s.enable_prompt_embeds, s.model_dir) == (9100, True, "/models/x")


def test_model_dir_without_config_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="holds no config.json"):
        launch.prepare(replace(launch.Settings(), model_dir=str(tmp_path), build_dir=str(tmp_path / "b")))


@pytest.mark.live
def test_start_stop_leaves_no_shared_memory(tmp_path, model_dir):
    """SIGTERM lets the Python backend unlink its /dev/shm regions; a second server on other
    ports shows it without touching the session's server."""
    before = set(glob.glob("/dev/shm/triton_python_backend_shm_region_*"))
    s = replace(launch.Settings(), build_dir=str(tmp_path), model_dir=str(model_dir),
                http_port=18100, grpc_port=18101, metrics_port=18102)
    try:
        assert launch.start(s) == 0
        mine = set(glob.glob("/dev/shm/triton_python_backend_shm_region_*")) - before
        assert mine, "the server created no shared-memory regions: nothing was checked"
        pid = int(Path(s.pid_file).read_text())
    finally:
        launch.stop(s)
    assert not launch.is_ready(s)
    assert not (mine & set(glob.glob("/dev/shm/triton_python_backend_shm_region_*")))
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    assert not os.path.exists(s.pid_file)


@pytest.mark.parametrize("family, grid", [("qwen2_vl", "image_grid_thw"), ("pixtral", "image_sizes")])
def test_family_variants_are_picked(tmp_path, model_dir, family, grid):
    """A vision-language model gets mm_process and the family's ensembles; a text model does not."""
    s = replace(launch.Settings(), build_dir=str(tmp_path), model_dir=str(model_dir))
    mm_repo = launch.render_repository(s, family)
    assert (mm_repo / "mm_process" / "config.pbtxt").exists()
    assert grid in (mm_repo / "render_chat" / "config.pbtxt").read_text()
    assert 'model_name: "mm_process"' in (mm_repo / "chat" / "config.pbtxt").read_text()
    assert "mm_items" in (mm_repo / "chat_render" / "config.pbtxt").read_text()
    assert not list(mm_repo.glob("*/config.*.pbtxt")), "variant files must not reach the served repository"
    text_repo = launch.render_repository(s, None)
    assert not (text_repo / "mm_process").exists()
    assert "mm_process" not in (text_repo / "render_chat" / "config.pbtxt").read_text()
