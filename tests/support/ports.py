"""Every live test file's ports, from one table.

Each block is a file's (or a shared server's) range of loopback ports: its base, taken from an
environment variable so that two test sessions can run side by side, and its size. ``make test``
runs files in parallel (pytest-xdist workers, each taking whole files), so no two blocks may
overlap (``tests/unit/test_test_ports.py``). A block that more than one file starts a server on
(``shared``) is moved by ``WORKER_SHIFT`` for each worker after the first, as every worker starts
its own; a file's own block stays, as one worker runs the whole file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class PortBlock:
    """One range of ports the tests bind."""

    env: str
    """The environment variable that moves the block (its base port)."""

    base: int
    """The first port unless ``env`` says otherwise."""

    size: int
    """How many ports from the base the block's servers may take."""

    shared: bool = False
    """Whether servers on it are started by several files (each pytest-xdist worker its own)."""


BLOCKS: dict[str, PortBlock] = {
    # The session server: HTTP, gRPC, metrics and the front on the first four (TEST_GRPC_PORT,
    # TEST_METRICS_PORT and TEST_OPENAI_PORT move those one by one).
    "session": PortBlock("TEST_HTTP_PORT", 18000, 10, shared=True),
    "launcher": PortBlock("TEST_LAUNCHER_PORT", 18100, 10),
    "supervisor": PortBlock("TEST_SUPERVISOR_PORT", 18110, 30),
    "mixed_traffic": PortBlock("TEST_MIXED_TRAFFIC_PORT", 18150, 10),
    "front_availability": PortBlock("TEST_FRONT_AVAILABILITY_PORT", 18200, 10),
    "trtllm_clients": PortBlock("TEST_TRTLLM_CLIENTS_PORT", 18210, 10),
    "prompt_embeds": PortBlock("TEST_PROMPT_EMBEDS_PORT", 18220, 10),
    # The render-only servers of the chat tests' other templates (tests/support/chat_servers.py).
    "chat_qwen3": PortBlock("TEST_CHAT_QWEN3_PORT", 18300, 10, shared=True),
    "load_watch": PortBlock("TEST_LOAD_WATCH_PORT", 18320, 10),
    "chat_qwen2_vl": PortBlock("TEST_CHAT_QWEN2_VL_PORT", 18350, 10, shared=True),
    "chat_mistral": PortBlock("TEST_CHAT_MISTRAL_PORT", 18400, 10, shared=True),
    "engine": PortBlock("TEST_ENGINE_PORT", 18450, 10),
    "chat_no_template": PortBlock("TEST_CHAT_NO_TEMPLATE_PORT", 18500, 10),
    "vllm": PortBlock("TEST_VLLM_PORT", 18520, 10),
    "faults": PortBlock("TEST_FAULTS_PORT", 18600, 10),
    "vllm_render": PortBlock("TEST_VLLM_RENDER_PORT", 18620, 10),
    "max_model_len": PortBlock("TEST_MAX_MODEL_LEN_PORT", 18700, 10),
    "untrusted_templates": PortBlock("TEST_UNTRUSTED_TEMPLATES_PORT", 18750, 10),
    # One server per image family, 100 apart.
    "multimodal": PortBlock("TEST_MULTIMODAL_PORT", 18800, 110),
    "deployment": PortBlock("TEST_DEPLOYMENT_PORT", 19000, 10),
    "autoscaling": PortBlock("TEST_AUTOSCALING_PORT", 19150, 10),
    # One server per parser setting, 10 apart.
    "parsing": PortBlock("TEST_PARSING_PORT", 19300, 60),
    # vLLM's engine and the stand-in for each image family, 10 apart.
    "vllm_image": PortBlock("TEST_VLLM_IMAGE_PORT", 19400, 40),
    "image": PortBlock("TEST_IMAGE_PORT", 19500, 10),
    "stub_crash": PortBlock("TEST_STUB_CRASH_PORT", 19600, 20),
}

# How far each pytest-xdist worker after the first moves the shared blocks: below every block, and
# every block stays below 20000, where the launcher draws its servers' inner ports at random
# (launcher/edge.py, free_loopback_ports): a block there could be taken by another server's edge.
WORKER_SHIFT = -6000
INNER_PORTS_FROM = 20000


def port(name: str) -> int:
    """The first port of ``name``'s block (its environment variable, or the table's base)."""
    block = BLOCKS[name]
    return int(os.environ.get(block.env, block.base))


MOVED_FOR = "TEST_PORTS_MOVED_FOR"
"""Set to the worker whose move the environment already holds: the move is made once per process,
however often the module that asks for it runs (a test importing ``tests.conftest`` runs the
conftest a second time, under that name)."""


def worker_environment(worker: str, environ: dict[str, str]) -> dict[str, str]:
    """The environment variables that move the shared blocks to ``worker``'s own ports
    (``gw0``, a lone session, or an environment moved already: none)."""
    n = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    if n == 0 or environ.get(MOVED_FOR) == worker:
        return {}
    session = BLOCKS["session"]
    envs = {b.env: b.base for b in BLOCKS.values() if b.shared}
    envs |= {env: session.base + i for i, env in enumerate(SESSION_PORT_ENVS) if i}
    moved = {env: str(int(environ.get(env, base)) + WORKER_SHIFT * n) for env, base in envs.items()}
    return {**moved, MOVED_FOR: worker}


# The session server's four ports, in order (the first is the block's own variable).
SESSION_PORT_ENVS = ("TEST_HTTP_PORT", "TEST_GRPC_PORT", "TEST_METRICS_PORT", "TEST_OPENAI_PORT")


def session_port(i: int) -> int:
    """The session server's ``i``-th port (0 HTTP, 1 gRPC, 2 metrics, 3 the front)."""
    env = SESSION_PORT_ENVS[i]
    return int(os.environ.get(env, BLOCKS["session"].base + i))
