"""Shared fixtures: the default model, its reference tokenizer, and a real tritonserver.

The live server is started once per session on its own ports (18000-18002 unless
TEST_HTTP_PORT etc. say otherwise) and its own build folder, so it never disturbs a
`make serve` running on the defaults.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
DEFAULT_MODEL = BUILD / "models" / "smollm2-135m-instruct"

# The shared helpers (tests/support/) import as top-level modules, as the test files' own folders do.
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


SESSION_BUILD_ENV = ("TEST_BUILD_DIR", str(BUILD / "test-server"))


def _worker_environment() -> dict[str, str]:
    """``make test`` runs pytest-xdist workers that each take whole files: a worker after the
    first moves the shared port blocks (``tests/support/ports.py``) and builds its session server
    in a folder of its own."""
    from ports import worker_environment

    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    moved = worker_environment(worker, dict(os.environ))
    if moved:
        name, default = SESSION_BUILD_ENV
        moved[name] = f"{os.environ.get(name, default)}-{worker}"
    return moved


os.environ.update(_worker_environment())


class ServerStartRefusedError(RuntimeError):
    """A test not marked `live` tried to start a server (`make unit` must start none)."""


# What a unit test must never start: Triton, the container entrypoint (or a container), the load
# tools and Prometheus as programs; the launcher's supervisor and front as modules, and the launcher
# with a start command.
_SERVER_PROGRAMS = frozenset({"tritonserver", "entrypoint.sh", "perf_analyzer", "genai-perf", "podman", "prometheus"})
_SERVER_MODULES = frozenset({"launcher.supervisor", "openai_front"})
_STARTING_LAUNCH_COMMANDS = frozenset({"serve", "start"})


def _is_server_command(args: object) -> bool:
    argv = [str(args)] if isinstance(args, (str, os.PathLike)) else [str(a) for a in args or []]
    if not argv or Path(argv[0].split()[0]).name in _SERVER_PROGRAMS:
        return bool(argv)
    module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else ""
    return module in _SERVER_MODULES or (
        module in ("launcher", "launcher.cli") and bool(_STARTING_LAUNCH_COMMANDS & set(argv))
    )


class MisplacedTestError(pytest.UsageError):
    """A test whose folder does not say what it is: ``tests/live/`` holds exactly the tests marked
    ``live`` (they start or talk to servers), ``tests/unit/`` the rest."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Before ``-m`` deselects anything: every test sits in the folder of its kind."""
    wrong = []
    for item in items:
        folder = Path(str(item.path)).parent.name
        live = item.get_closest_marker("live") is not None
        if folder not in ("unit", "live") or live != (folder == "live"):
            wrong.append(f"{item.nodeid} ({'marked' if live else 'not marked'} live)")
    if wrong:
        raise MisplacedTestError("tests outside the folder of their kind:\n" + "\n".join(wrong))
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(Path(str(item.path)).name, len(rank)))  # stable: the rest keep their order


# The files that take longest, longest first (worker seconds measured in a full `make test`: vLLM's
# engine started twice, a minute of Prometheus' rate window, minutes of load driven). `make test`
# passes --no-loadscope-reorder, so pytest-xdist's workers take whole files in this order (by
# default it orders them by their number of tests, which ran the one-test load files last, on one
# worker, while the other stood idle); the rest follow, and both workers finish together.
LONGEST_FIRST = (
    "test_vllm_image_engine_live.py",  # 227 s
    "test_autoscaling_signal_live.py",  # 137 s
    "test_mixed_traffic_live.py",  # 78 s
    "test_vllm_engine_live.py",  # 66 s
    "test_genai_perf_live.py",  # 66 s
    "test_output_parsing_live.py",  # 66 s
    "test_chat_vllm_fixtures_live.py",  # 65 s
    "test_launcher_live.py",  # 58 s
    "test_render_chat_live.py",  # 56 s
    "test_front_fuzz_live.py",  # 54 s
    "test_stub_crash_cleanup_live.py",  # 52 s
    "test_multimodal_live.py",  # 48 s
    "test_engine_live.py",  # 46 s
    "test_config_contract.py",  # 46 s
    "test_trtllm_clients_live.py",  # 39 s
    "test_lane_equivalence.py",  # 32 s
    "test_completion_live.py",  # 28 s
    "test_trtllm_front_live.py",  # 26 s
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Refuse any server start from a test not explicitly marked `live`.

    Marks are explicit in each module (`pytestmark = pytest.mark.live`); this guard is what makes
    a missing mark a failure rather than a `make unit` that quietly starts tritonservers.
    """
    if item.get_closest_marker("live") is not None:
        yield
        return
    import subprocess

    real_popen_init = subprocess.Popen.__init__

    def guarded_init(self, args, *a, **kw):
        if _is_server_command(args):
            raise ServerStartRefusedError(f"{item.nodeid} is not marked live but started {args!r}")
        real_popen_init(self, args, *a, **kw)

    subprocess.Popen.__init__ = guarded_init
    try:
        yield
    finally:
        subprocess.Popen.__init__ = real_popen_init


# What a failed live test shows of each server it used: the lines that say whether tritonserver
# died, restarted or was ended, and why (CI keeps no build folder to read afterwards).
_SERVER_LOG_TAILS = (("supervisor_log_file", 40), ("log_file", 60), ("watchdog_log_file", 20))


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return f"({e.strerror})"
    return "\n".join(text.splitlines()[-lines:])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed live test's report carries the tails of its servers' logs (supervisor, watchdog,
    tritonserver): a server that crashed or restarted under a test is then named in CI's output."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed or item.get_closest_marker("live") is None:
        return
    seen: set[Path] = set()
    for value in getattr(item, "funcargs", {}).values():
        build = getattr(value, "build", None)
        if not isinstance(build, Path) or build in seen:
            continue
        seen.add(build)
        for attr, lines in _SERVER_LOG_TAILS:
            path = getattr(value, attr)
            report.sections.append((f"{path} (last {lines} lines)", _tail(path, lines)))


@pytest.fixture(scope="session")
def model_dir() -> Path:
    from model_builders.default_model import build

    return build(DEFAULT_MODEL)


@pytest.fixture(scope="session")
def hf_tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="session")
def server_settings(model_dir):
    from ports import session_port

    from launcher.settings import Settings

    return replace(
        Settings(),
        model_dir=str(model_dir),
        # Separate folders and ports let two test sessions run side by side.
        build_dir=os.environ.get(*SESSION_BUILD_ENV),
        http_port=session_port(0),
        grpc_port=session_port(1),
        metrics_port=session_port(2),
        openai_port=session_port(3),
        # A longer window than the default makes requests sent together share a batch, which
        # the batch-isolation tests rely on.
        max_queue_delay_us=5000,
        tokenize_instances=1,
        # The encoder-decoder ensembles are opt-in; tests/live/test_encoder_decoder_live.py uses them here.
        encoder_decoder=True,
        enable_prompt_embeds=True,  # tests/live/test_prompt_embeds_live.py runs a second server with it off
        # The sandbox tests send their own templates; tests/live/test_chat_vllm_fixtures_live.py runs the
        # other templates' servers untrusted, vLLM's default.
        trust_request_chat_template=True,
        max_input_bytes=6 * 1024 * 1024,  # small enough for tests/live/test_render_completion_live.py to cross it
        edge_header_timeout_s=4.0,  # tests/live/test_edge_live.py waits for it
    )


@pytest.fixture(scope="session")
def server(server_settings):
    from launcher import cli as launch

    launch.stop(server_settings)
    if launch.start(server_settings) != 0:
        pytest.fail(f"tritonserver did not start; see {server_settings.log_file}")
    yield server_settings
    launch.stop(server_settings)


@pytest.fixture(params=["http", "grpc"])
def client(request, server):
    from client import RendererClient

    port = server.http_port if request.param == "http" else server.grpc_port
    with RendererClient(f"{server.host}:{port}", request.param) as c:
        yield c


@pytest.fixture()
def http_client(server):
    from client import RendererClient

    with RendererClient(f"{server.host}:{server.http_port}", "http") as c:
        yield c


@pytest.fixture(scope="module")
def encdec_dir(server_settings):
    """The tiny BART the session's server serves as its encoder-decoder model (built offline)."""
    from model_builders import default_model, seq2seq_model

    return seq2seq_model.build(
        server_settings.resolved_encdec_model_dir, default_model.build(server_settings.resolved_model_dir)
    )


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both tiny vision-language models (seeded), on the reference tokenizers built offline."""
    from model_builders import vlm_model
    from model_builders.reference_tokenizers import build

    build(ROOT / "build" / "models" / "tokenizers")
    base = tmp_path_factory.mktemp("vlm-fixtures")
    return {fam: vlm_model.build(base / fam, family=fam) for fam in ("qwen2_vl", "pixtral")}
