"""Where `make bench` works and which ports and input sets it uses (shared by the runner and
the report, so neither imports the other)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("BUILD_DIR", ROOT / "build"))
WORK = BUILD / "bench"
HTTP_PORT, GRPC_PORT, METRICS_PORT = 19300, 19301, 19302
PEER_PORT = 19310
PEER_FASTOKENS_PORT = 19320  # the second peer, up beside the first in the head-to-head
FLOOR_PORT = 19330  # the floor server's HTTP port in the head-to-head (gRPC +1, metrics +2)
VLLM_RS_PORT = 19360  # vLLM's Rust render server (build/vllm-rs); +1: its replay of the recorded chats

MAIN_INPUTS = {"render_completion": "completion_mix", "render_chat": "chat_mix"}
EXTRA_INPUTS = ["completion_short", "completion_long", "chat_multiturn", "chat_tools"]
ALL_INPUTS = list(MAIN_INPUTS.values()) + EXTRA_INPUTS
