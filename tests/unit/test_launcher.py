"""The launcher: templates filled, settings from the environment, clean start and stop."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from launcher import cli as launch
from launcher import repository, server
from launcher.processes import clean_regions
from launcher.supervisor import Backoff, Supervisor, describe_exit


def test_every_placeholder_is_filled(tmp_path, model_dir):
    s = replace(
        launch.Settings(),
        build_dir=str(tmp_path),
        model_dir=str(model_dir),
        tokenize_instances=3,
        max_batch_size=17,
        max_queue_delay_us=123,
        encoder_decoder=True,
    )
    repo = repository.render_repository(s)
    configs = {p.parent.name: p.read_text() for p in repo.glob("*/config.pbtxt")}
    assert {
        "tokenize",
        "llm",
        "detokenize",
        "render_completion",
        "completion",
        "generation_params",
        "tokenize_enc_dec",
        "llm_enc_dec",
        "render_encoder_decoder",
        "encoder_decoder_completion",
    } <= set(configs)
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
    monkeypatch.setattr(repository, "TEMPLATES", templates)
    with pytest.raises(KeyError, match="max_batch_sise"):
        repository.render_repository(replace(launch.Settings(), build_dir=str(tmp_path / "b")))


def test_settings_from_environment(monkeypatch):
    monkeypatch.setenv("HTTP_PORT", "9100")
    monkeypatch.setenv("ENABLE_PROMPT_EMBEDS", "true")
    monkeypatch.setenv("MODEL_DIR", "/models/x")
    s = launch.Settings.from_env()
    assert (s.http_port, s.enable_prompt_embeds, s.model_dir) == (9100, True, "/models/x")


def test_instance_counts_follow_the_usable_cpus(monkeypatch):
    from launcher import settings as settings_mod

    # Two cores (this machine's kind): one chat_render, one tokenize; sixteen: 7 and 8.
    assert settings_mod.default_instances(settings_mod.CHAT_RENDER_SHARE, least=1, cpus=2) == 1
    assert settings_mod.default_instances(settings_mod.TOKENIZE_SHARE, least=1, cpus=2) == 1
    assert settings_mod.default_instances(settings_mod.CHAT_RENDER_SHARE, least=1, cpus=16) == 7
    assert settings_mod.default_instances(settings_mod.TOKENIZE_SHARE, least=1, cpus=16) == 8
    # The settings resolve to them when not set; with request templates trusted chat_render has two
    # instances at least, so that one slow template cannot stall every chat.
    monkeypatch.setattr("os.sched_getaffinity", lambda _: {0, 1})
    s = launch.Settings()
    assert (s.resolved_chat_render_instances, s.resolved_tokenize_instances) == (1, 1)
    assert replace(s, trust_request_chat_template=True).resolved_chat_render_instances == 2
    # The environment decides when set.
    monkeypatch.setenv("CHAT_RENDER_INSTANCES", "5")
    assert launch.Settings.from_env().resolved_chat_render_instances == 5


@pytest.mark.parametrize(
    ("cpu_max", "expected"), [("max 100000", 64), ("400000 100000", 4), ("150000 100000", 2), ("50000 100000", 1)]
)
def test_usable_cpus_are_capped_by_the_cgroup_quota(tmp_path, monkeypatch, cpu_max, expected):
    from launcher.settings import usable_cpus

    monkeypatch.setattr("os.sched_getaffinity", lambda _: set(range(64)))
    (tmp_path / "cpu.max").write_text(cpu_max + "\n")
    assert usable_cpus(tmp_path / "cpu.max") == expected
    assert usable_cpus(tmp_path / "absent") == 64  # no cgroup v2 quota: the affinity


def test_model_dir_without_config_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="holds no config.json"):
        launch.prepare(replace(launch.Settings(), model_dir=str(tmp_path), build_dir=str(tmp_path / "b")))


@pytest.mark.parametrize("family, grid", [("qwen2_vl", "image_grid_thw"), ("pixtral", "image_sizes")])
def test_family_variants_are_picked(tmp_path, model_dir, family, grid):
    """A vision-language model gets mm_process and the family's ensembles; a text model does not."""
    s = replace(launch.Settings(), build_dir=str(tmp_path), model_dir=str(model_dir))
    mm_repo = repository.render_repository(s, family)
    assert (mm_repo / "mm_process" / "config.pbtxt").exists()
    assert grid in (mm_repo / "render_chat" / "config.pbtxt").read_text()
    assert 'model_name: "mm_process"' in (mm_repo / "chat" / "config.pbtxt").read_text()
    assert "mm_items" in (mm_repo / "chat_render" / "config.pbtxt").read_text()
    assert not list(mm_repo.glob("*/config.*.pbtxt")), "variant files must not reach the served repository"
    text_repo = repository.render_repository(s, None)
    assert not (text_repo / "mm_process").exists()
    assert "mm_process" not in (text_repo / "render_chat" / "config.pbtxt").read_text()


def test_builtin_vlm_builds_on_the_tokenizers_inside_models_dir(tmp_path, monkeypatch, model_dir):
    """MODELS_DIR outside build/: the tokenizers the tiny model is built on are the ones the
    launcher built (MODELS_DIR/tokenizers), passed explicitly; nothing lands beside MODELS_DIR."""
    from model_builders import reference_tokenizers, vlm_model

    cached = reference_tokenizers.build(launch.ROOT / "build" / "models" / "tokenizers")  # built once, offline after
    models = tmp_path / "elsewhere" / "models"
    for folder in cached.values():  # seeded, so the launcher reuses them instead of fetching again
        shutil.copytree(folder, models / "tokenizers" / folder.name)
    # The defaults under build/ must not be what the build reads.
    monkeypatch.setattr(vlm_model, "DEFAULT_TOKENIZER_DIR", tmp_path / "absent" / "qwen3")
    monkeypatch.setattr(vlm_model, "PIXTRAL_TOKENIZER_DIR", tmp_path / "absent" / "mistral")
    s = replace(
        launch.Settings(),
        model="qwen2-vl",
        models_dir=str(models),
        build_dir=str(tmp_path / "b"),
        encoder_decoder_model_dir=str(model_dir),
    )
    launch.prepare(s)
    assert s.resolved_model_dir.parent == models and vlm_model.is_built(s.resolved_model_dir)
    tokenizer = (s.tokenizers_dir / reference_tokenizers.QWEN3_DIR / "tokenizer.json").read_bytes()
    assert (s.resolved_model_dir / "tokenizer.json").read_bytes() == tokenizer
    assert sorted(p.name for p in models.parent.iterdir()) == ["models"]
    assert 'string_value: "%s"' % s.resolved_model_dir in (s.repository / "mm_process" / "config.pbtxt").read_text()


def test_shm_prefix_names_one_build_folder(tmp_path):
    a = replace(launch.Settings(), build_dir=str(tmp_path / "a"), edge=False)
    b = replace(launch.Settings(), build_dir=str(tmp_path / "b"), edge=False)
    assert a.shm_prefix != b.shm_prefix
    # Still under the backend's default prefix: every glob for its regions keeps matching.
    assert a.shm_prefix.startswith("triton_python_backend_shm_region_")
    assert f"--backend-config=python,shm-region-prefix-name={a.shm_prefix}" in server.server_command(a, "token")


@pytest.mark.parametrize(
    ("models", "asked", "threads"),
    [
        ("", 0, server.GENERATION_THREAD_POOL_SIZE),  # every model: generations too
        ("completion", 0, server.GENERATION_THREAD_POOL_SIZE),
        ("detokenize", 0, server.GENERATION_THREAD_POOL_SIZE),
        ("render_chat,render_completion", 0, server.TRITON_THREAD_POOL_SIZE),  # no generation
        ("render_chat", 7, 7),  # the setting wins
    ],
)
def test_python_threads_cover_the_generations_in_flight(tmp_path, models, asked, threads):
    s = replace(launch.Settings(), build_dir=str(tmp_path), edge=False, models=models, python_thread_pool_size=asked)
    assert f"--backend-config=python,thread-pool-size={threads}" in server.server_command(s, "token")


def test_settings_round_trip_through_json(tmp_path):
    s = replace(
        launch.Settings(),
        build_dir=str(tmp_path),
        http_port=18123,
        enable_prompt_embeds=True,
        startup_timeout_s=12.5,
        models="render_chat",
    )
    assert launch.Settings.from_json(s.to_json()) == s


def test_backoff_doubles_up_to_its_cap():
    b = Backoff(first_s=1.0, cap_s=8.0)
    assert [b.delay(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_exit_reasons_name_the_signal():
    assert describe_exit(-signal.SIGKILL) == "killed by signal 9 (SIGKILL)"
    assert describe_exit(-signal.SIGSEGV) == "killed by signal 11 (SIGSEGV)"
    assert describe_exit(3) == "exit code 3"


def test_clean_regions_takes_only_its_prefix(tmp_path):
    for name in ("p_1", "p_2", "q_1"):
        (tmp_path / name).write_bytes(b"")
    assert sorted(clean_regions("p_", tmp_path)) == ["p_1", "p_2"]
    assert [p.name for p in tmp_path.iterdir()] == ["q_1"]


# A stand-in for tritonserver: answers /v2/health/ready and holds a "region" named with the prefix,
# so the supervisor's restart, clean-up and stop run without Triton (and without a live mark).
FAKE_SERVER = """
import http.server, os, signal, sys
from pathlib import Path
port, region, exit_code = int(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
if exit_code > 0:
    sys.exit(exit_code)
crashed_once = region.with_name("crashed-once")
if exit_code < 0 and not crashed_once.exists():  # a crash while loading, the first time only
    crashed_once.write_bytes(b"")
    os.kill(os.getpid(), -exit_code)
region.with_name(region.name + str(__import__("os").getpid())).write_bytes(b"")
class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/v2/health/ready" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), Ready).serve_forever()
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _fake_supervisor(tmp_path: Path, shm_dir: Path, exit_code: int = 0) -> tuple[Supervisor, launch.Settings]:
    port = _free_port()
    s = replace(launch.Settings(), build_dir=str(tmp_path / "b"), http_port=port, openai_port=0, edge=False)
    script = tmp_path / "stand_in_server.py"
    script.write_text(FAKE_SERVER)
    cmd = [sys.executable, str(script), str(port), str(shm_dir / s.shm_prefix), str(exit_code)]
    return Supervisor(s, cmd, dict(os.environ), "token", Backoff(first_s=0.2, cap_s=1.0)), s


def _until(predicate, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail("timed out")
        time.sleep(0.05)


def test_supervisor_restarts_a_killed_server_and_stops_for_good(tmp_path, monkeypatch):
    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setattr("launcher.processes.SHM_DIR", shm)
    sup, s = _fake_supervisor(tmp_path, shm)
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(sup.run()))
    runner.start()
    try:
        _until(lambda: sup.state.ready)
        first = sup.state.server_pid
        assert list(shm.iterdir()), "the stand-in made no region: the clean-up would check nothing"
        os.kill(first, signal.SIGKILL)
        _until(lambda: sup.state.ready and sup.state.server_pid != first)
        on_disk = launch.supervisor_state(s)
        assert (on_disk.restarts, on_disk.last_exit) == (1, "killed by signal 9 (SIGKILL)")
        second = sup.state.server_pid
        assert [p.name for p in shm.iterdir()] == [f"{s.shm_prefix}{second}"], "the dead server's region stays"
        assert int(s.pid_file.read_text()) == second
    finally:
        sup.request_stop()
        runner.join(30)
    assert result == [0]
    assert not Path(f"/proc/{second}").exists() or "zombie" in Path(f"/proc/{second}/status").read_text().lower()
    final = launch.supervisor_state(s)
    assert (final.restarts, final.running, final.server_pid) == (1, False, None), "a requested stop is no restart"
    assert not list(shm.iterdir()) and not s.pid_file.exists() and not s.supervisor_pid_file.exists()


def test_supervisor_gives_up_on_a_server_that_fails_to_start(tmp_path, monkeypatch):
    """An exit code before the first readiness is a bad setting or model: restarting repeats it."""
    monkeypatch.setattr("launcher.processes.SHM_DIR", tmp_path)
    sup, s = _fake_supervisor(tmp_path, tmp_path, exit_code=3)
    assert sup.run() == 3
    assert launch.supervisor_state(s).restarts == 0


def test_supervisor_restarts_a_server_that_crashes_while_loading(tmp_path, monkeypatch):
    """A signal before the first readiness is a crash (a SIGSEGV, an OOM kill): restarted."""
    monkeypatch.setattr("launcher.processes.SHM_DIR", tmp_path)
    sup, s = _fake_supervisor(tmp_path, tmp_path, exit_code=-signal.SIGSEGV)
    runner = threading.Thread(target=sup.run)
    runner.start()
    try:
        _until(lambda: sup.state.ready)
        assert (sup.state.restarts, sup.state.last_exit) == (1, "killed by signal 11 (SIGSEGV)")
    finally:
        sup.request_stop()
        runner.join(30)
    assert not runner.is_alive()


def test_the_encoder_decoder_models_are_served_only_when_asked(tmp_path, model_dir):
    """A decoder-only server starts no encoder-decoder stub (about 0.9 GB with their models); the
    setting, a model folder for them, or MODELS naming one of them brings them back."""
    from launcher.settings import ENCODER_DECODER_MODELS

    base = replace(launch.Settings(), build_dir=str(tmp_path), model_dir=str(model_dir))
    assert not set(ENCODER_DECODER_MODELS) & {
        p.parent.name for p in repository.render_repository(base).glob("*/config.pbtxt")
    }
    for s in (
        replace(base, encoder_decoder=True),
        replace(base, encoder_decoder_model_dir=str(model_dir)),
        replace(base, models="render_completion,render_encoder_decoder"),
    ):
        rendered = {p.parent.name for p in repository.render_repository(s).glob("*/config.pbtxt")}
        assert set(ENCODER_DECODER_MODELS) <= rendered, s


def test_the_stages_get_the_recorded_tokenizer(tmp_path, model_dir):
    """Every stage that loads the model's tokenizer is handed the record the launcher made, and
    the record is proven (so the stubs never import transformers)."""
    from renderer import light_tokenizer
    from tests.support.fake_triton import parse_config

    s = replace(launch.Settings(), build_dir=str(tmp_path), model_dir=str(model_dir))
    repository.record_tokenizer(s)
    record = repository.tokenizer_record_dir(s)
    assert light_tokenizer.is_current(record, model_dir)
    assert light_tokenizer.load(record, model_dir)[0] is not None
    repo = repository.render_repository(s)
    for stage in ("tokenize", "detokenize", "generation_params", "ensemble_params", "chat_render"):
        params = parse_config(repo / stage / "config.pbtxt").parameters
        assert params["tokenizer_record"].string_value == str(record), stage


@pytest.mark.parametrize("decoupled", [True, False])
def test_the_engines_transaction_policy_follows_the_setting(tmp_path, model_dir, decoupled):
    """``LLM_DECOUPLED`` is TensorRT-LLM's ``decoupled_mode`` for ``llm``, and ``detokenize`` is told
    which the engine is (it asks a plain one for one response)."""
    s = replace(launch.Settings(), build_dir=str(tmp_path), model_dir=str(model_dir), llm_decoupled=decoupled)
    repository.render_repository(s)
    word = "true" if decoupled else "false"
    assert f"model_transaction_policy {{ decoupled: {word} }}" in (s.repository / "llm" / "config.pbtxt").read_text()
    detokenize = (s.repository / "detokenize" / "config.pbtxt").read_text()
    assert f'key: "engine_decoupled" value: {{ string_value: "{word}" }}' in detokenize
    # The generation ensembles' post-processor stays decoupled either way.
    assert "model_transaction_policy { decoupled: true }" in detokenize


@pytest.mark.parametrize(("policy", "decoupled"), [("decoupled: true", True), ("decoupled: False", False), ("", False)])
def test_an_engine_folders_own_policy_is_read(tmp_path, policy, decoupled):
    engine = tmp_path / "tensorrt_llm"
    engine.mkdir()
    block = f"model_transaction_policy {{\n  {policy}\n}}\n" if policy else ""
    (engine / "config.pbtxt").write_text(f'name: "tensorrt_llm"\nbackend: "tensorrtllm"\n{block}')
    s = replace(launch.Settings(), build_dir=str(tmp_path / "b"), engine_model_dir=str(engine))
    assert repository.engine_decoupled(s) is decoupled


# A stand-in for tritonserver that, on SIGTERM, writes whether the watchdog (its argument) still runs.
SERVER_THAT_CHECKS_THE_WATCHDOG = """
import os, signal, sys, time
watchdog, out = int(sys.argv[1]), sys.argv[2]
def stop(*_):
    try:
        os.kill(watchdog, 0)
        seen = "running"
    except ProcessLookupError:
        seen = "gone"
    open(out, "w").write(seen)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(out + ".ready", "w").write("")
while True:
    time.sleep(0.05)
"""


def test_a_stop_ends_the_watchdog_before_the_server(tmp_path, monkeypatch):
    """Stopping unloads every model, so their stubs exit: a watchdog still running would take that
    for a crash and reload a model, which holds tritonserver up for its whole exit timeout."""
    monkeypatch.setattr("launcher.processes.SHM_DIR", tmp_path)
    sup, _ = _fake_supervisor(tmp_path, tmp_path)
    watchdog = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    seen = tmp_path / "seen"
    script = tmp_path / "server.py"
    script.write_text(SERVER_THAT_CHECKS_THE_WATCHDOG)
    server = subprocess.Popen([sys.executable, str(script), str(watchdog.pid), str(seen)], start_new_session=True)
    _until(lambda: Path(str(seen) + ".ready").exists())
    sup._bury(server, watchdog, graceful=True)
    assert seen.read_text() == "gone", "the watchdog still ran when the server was told to stop"
    assert server.returncode == 0 and watchdog.returncode is not None
