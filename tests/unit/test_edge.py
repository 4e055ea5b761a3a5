"""The edge's nginx config (launcher/edge.py): what it promises, checked on the rendered text and
by nginx's own config test (``nginx -t``, which parses and loads the config but serves nothing)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import replace

import pytest

from launcher import edge
from launcher.settings import Settings

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)


def _settings(tmp_path, **kw) -> Settings:
    s = Settings(build_dir=str(tmp_path / "b"), http_port=18500, grpc_port=18501, metrics_port=18502, openai_port=18503)
    return edge.with_inner_ports(replace(s, **kw))


def _server_block(conf: str, port: int) -> str:
    start = conf.index(f":{port} ")
    return conf[start : conf.index("\n    server {", start) if "\n    server {" in conf[start:] else len(conf)]


def test_inner_ports_are_distinct_free_loopback_ports(tmp_path):
    s = _settings(tmp_path)
    inner = s.inner
    ports = [inner.http, inner.grpc, inner.metrics, inner.front, inner.front_grpc]
    assert inner.host == "127.0.0.1" and len(set(ports)) == 5 and all(ports)
    assert not {s.http_port, s.grpc_port, s.metrics_port, s.openai_port} & set(ports)
    assert s.triton_http_url == f"http://127.0.0.1:{inner.http}"
    # Resolved once: a second call keeps them (the supervisor restarts tritonserver on the same ports).
    assert edge.with_inner_ports(s).inner_ports == s.inner_ports


def test_without_the_edge_the_servers_bind_the_client_ports(tmp_path):
    s = replace(Settings(build_dir=str(tmp_path / "b")), edge=False, host="0.0.0.0")
    assert edge.with_inner_ports(s) is s
    assert (s.inner.host, s.inner.http, s.inner.grpc, s.inner.front) == ("0.0.0.0", 8000, 8001, 9000)
    assert s.inner.front_grpc == 0  # only the edge can send one gRPC method to the proxy


def test_inner_ports_name_five_ports(tmp_path):
    s = replace(Settings(build_dir=str(tmp_path / "b")), inner_ports="1001,1002,1003,1004")
    with pytest.raises(ValueError, match="5 ports"):
        s.inner
    assert replace(s, inner_ports="1001,1002,1003,1004,1005").inner.front_grpc == 1005


def test_no_front_no_front_port(tmp_path):
    s = _settings(tmp_path, openai_port=0)
    assert s.inner.front == 0 and s.inner.front_grpc == 0
    conf = edge.render_config(s)
    assert "upstream front" not in conf and f"location ~ {edge.GENERATE_PATHS}" not in conf
    # Without the front, streams go to tritonserver as every other gRPC method does.
    assert "grpc_pass grpc://triton_grpc;" in _stream_location(conf)


def _stream_location(conf: str) -> str:
    return re.search(r"location = /inference.GRPCInferenceService/ModelStreamInfer \{[^}]*\}", conf).group(0)


def test_grpc_streams_go_to_the_fronts_proxy(tmp_path):
    s = _settings(tmp_path)
    conf = edge.render_config(s)
    assert f"upstream front_grpc {{ server 127.0.0.1:{s.inner.front_grpc}; keepalive 64; }}" in conf
    grpc = _server_block(conf, s.grpc_port)
    stream = _stream_location(grpc)
    assert "grpc_pass grpc://front_grpc;" in stream
    # Only the streams: unary calls (ModelInfer, metadata, health) go to tritonserver as before.
    root = grpc[grpc.index("location / {") :].split("}")[0]
    assert "grpc_pass grpc://triton_grpc;" in root


def test_grpc_drops_triton_grpc_error_on_every_method(tmp_path):
    s = _settings(tmp_path)
    grpc = _server_block(edge.render_config(s), s.grpc_port)
    assert " http2 " in grpc.split("\n")[0] + " "
    passes = grpc.count("grpc_pass ")
    assert passes == 2 and grpc.count('grpc_set_header triton_grpc_error "";') == passes
    # And nginx's default, which drops every header with an underscore, is kept explicitly.
    assert "ignore_invalid_headers on;" in edge.render_config(s)


def test_bodies_headers_and_answers_are_bounded(tmp_path):
    s = _settings(tmp_path, max_input_bytes=6 * 1024 * 1024, edge_header_timeout_s=7, edge_upstream_timeout_s=90)
    conf = edge.render_config(s)
    assert s.resolved_max_request_bytes == 7 * 1024 * 1024
    assert f"client_max_body_size {7 * 1024 * 1024};" in conf
    assert "client_header_timeout 7s;" in conf and "client_body_timeout 7s;" in conf
    assert "keepalive_timeout 600s;" in conf
    assert "proxy_read_timeout 90s;" in conf and "grpc_read_timeout 90s;" in conf
    # The only unbounded body is a gRPC stream's (many requests); Triton's stubs bound each input.
    stream = _stream_location(conf)
    assert "client_max_body_size 0;" in stream
    # A stream's client is silent while its answers come: only the answer's own timeout applies.
    assert "client_body_timeout 90s;" in stream
    # Over the limit: an answer that names it, in each port's own error form.
    limit = f"request body larger than the limit of {7 * 1024 * 1024} bytes (MAX_REQUEST_BYTES)"
    assert f"""return 413 '{{"error": "{limit}"}}';""" in _server_block(conf, s.http_port)
    assert '"type": "BadRequestError"' in _server_block(conf, s.openai_port)
    grpc = _server_block(conf, s.grpc_port)
    assert "add_header grpc-status 8 always;" in grpc and f'add_header grpc-message "{limit}" always;' in grpc
    assert "proxy_buffering off;" in conf  # generate_stream's events pass as they come


def test_tritons_generate_paths_go_to_the_front(tmp_path):
    s = _settings(tmp_path)
    http = _server_block(edge.render_config(s), s.http_port)
    block = http[http.index(f"location ~ {edge.GENERATE_PATHS}") :]
    assert "proxy_pass http://front;" in block.split("}")[0]
    pattern = re.compile(edge.GENERATE_PATHS)
    for path in (
        "/v2/models/completion/generate",
        "/v2/models/chat/generate_stream",
        "/v2/models/x/versions/1/generate",
    ):
        assert pattern.match(path), path
    for path in ("/v2/models/completion/infer", "/v2/models/completion/generate/x", "/v2/health/ready"):
        assert not pattern.match(path), path


def test_infer_on_a_decoupled_model_is_the_clients_error(tmp_path):
    s = _settings(tmp_path)
    http = _server_block(edge.render_config(s), s.http_port)
    block = http[http.index(f"location ~ {edge.INFER_PATHS}") :].split("}")[0]
    # Triton's 501 is replaced by a 400 naming the model; its 4xx answers keep their words.
    assert "proxy_intercept_errors on;" in block and "error_page 501 = @decoupled;" in block
    assert "error_page 400" not in block
    assert "return 400" in http[http.index("location @decoupled") :].split("}")[0]
    assert re.match(edge.INFER_PATHS, "/v2/models/completion/versions/1/infer")


def test_infer_500s_go_to_the_fronts_check(tmp_path):
    s = _settings(tmp_path)
    conf = edge.render_config(s)
    http = _server_block(conf, s.http_port)
    block = http[http.index(f"location ~ {edge.INFER_PATHS}") :].split("}")[0]
    assert "error_page 500 = @infer_check;" in block
    check = http[http.index("location @infer_check") :].split("}")[0]
    assert f"rewrite ^ {edge.INFER_CHECK_PATH} break;" in check and "proxy_pass http://front;" in check
    # The check is the edge's alone: the OpenAI port does not reach it.
    openai = _server_block(conf, s.openai_port)
    assert "return 404" in openai[openai.index(f"location = {edge.INFER_CHECK_PATH}") :].split("}")[0]
    # Without the front, Triton's 500s stay as they are.
    bare = _server_block(edge.render_config(_settings(tmp_path, openai_port=0)), s.http_port)
    assert "error_page 500" not in bare and "@infer_check" not in bare


def test_the_front_serves_the_check_only_behind_the_edge(tmp_path, monkeypatch):
    from launcher import processes

    seen: list[list[str]] = []

    class Popen:
        def __init__(self, cmd: list[str], **kwargs) -> None:
            seen.append(cmd)
            self.pid = 0

    monkeypatch.setattr(processes.subprocess, "Popen", Popen)
    for on in (True, False):
        s = _settings(tmp_path, edge=on)
        s.build.mkdir(parents=True, exist_ok=True)
        processes.start_front(s, follow_pid=1)
    assert seen[0][seen[0].index("--infer-check-path") + 1] == edge.INFER_CHECK_PATH
    assert "--infer-check-path" not in seen[1]


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed: `make edge` installs it (Debian's nginx-light)")
def test_nginx_loads_the_config(tmp_path):
    for s in (_settings(tmp_path), _settings(tmp_path, openai_port=0), _settings(tmp_path, host="0.0.0.0")):
        conf = edge.write_config(s)
        d = edge.edge_dir(s)
        check = subprocess.run(
            [NGINX, "-t", "-q", "-p", str(d), "-e", str(d / "error.log"), "-c", str(conf)],
            capture_output=True,
            text=True,
        )
        assert check.returncode == 0, check.stderr


def test_inner_ports_come_from_below_the_ephemeral_range():
    """Ports the kernel hands out to outgoing connections are not picked: one could be taken
    between the pick and tritonserver's bind."""
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    ports = edge.free_loopback_ports(50)
    assert len(set(ports)) == 50
    if low - 20000 >= 1000:
        assert all(20000 <= p < low for p in ports)
