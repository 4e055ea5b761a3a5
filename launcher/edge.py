"""The edge: nginx at every port a client reaches, tritonserver and the front behind it on loopback.

Triton 2.51 cannot defend these ports itself, and no newer Triton installs from the package
registry; what the edge stands in for (docs/RELIABILITY.md, "The edge"):

- gRPC's ``triton_grpc_error`` header: on streams it crashes tritonserver (a use after free that
  server PR 8708 fixed upstream). nginx drops request headers with underscores (its default,
  ``ignore_invalid_headers``), and the gRPC location clears that one by name as well.
- Request size: Triton 2.51 has no ``--http-max-input-size`` and takes gRPC messages up to 2 GB,
  and every input it takes lands in a Python stub's shared memory. Bodies over
  ``max_request_bytes`` are answered here (413 on HTTP, RESOURCE_EXHAUSTED on gRPC), naming the
  limit, before a byte reaches Triton.
- Slow clients: headers (and each part of a body) must come within ``edge_header_timeout_s``,
  and Triton only sees requests whose whole body has arrived.
- Abandoned requests: when a client leaves, nginx closes its connection to Triton, which cancels
  the request there (``proxy_ignore_client_abort off``). Triton 2.51 cancels an ensemble only
  between its steps, so gRPC streams (``ModelStreamInfer``) go to the front's proxy
  (``openai_front/grpc_proxy.py``), which stops a leaving client's generations; the HTTP generate
  endpoints go to the front too.

The config is rendered from ``Settings`` into the build folder; nginx runs in the foreground as a
child of the supervisor, which restarts it if it dies.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
from dataclasses import replace
from pathlib import Path

from launcher.settings import Settings

# Triton's generate extension, which the front serves in Triton's stead (openai_front/generate.py):
# Triton 2.51 runs a request on when its HTTP client leaves, and answers some client errors with a
# 500 or a 200 carrying the error.
GENERATE_PATHS = r"^/v2/models/[^/]+(/versions/[^/]+)?/generate(_stream)?$"
INFER_PATHS = r"^/v2/models/[^/]+(/versions/[^/]+)?/infer$"
DECOUPLED = (
    "model $infer_model streams its responses: send it to /v2/models/$infer_model/generate_stream"
    " or over a gRPC stream (ModelStreamInfer), not to /infer"
)
# Where the front names the client's error in an /infer request Triton answered with a 500
# (openai_front/infer_check.py); the edge alone sends requests there.
INFER_CHECK_PATH = "/_edge/infer_check"
# The gRPC method whose one call carries many requests: its body limit is per stream, not per
# request, so it is left to the per-message limit Triton's stubs apply (``max_input_bytes``).
STREAM_METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"


def nginx_binary() -> str:
    """Debian's nginx (``make edge`` installs ``nginx-light`` where it is missing)."""
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
    if found is None:
        raise SystemExit(
            "nginx is not installed: the edge in front of tritonserver needs it "
            "(`make edge` installs Debian's nginx-light; EDGE=0 serves without the edge)"
        )
    return found


def with_inner_ports(s: Settings) -> Settings:
    """``s`` with ``inner_ports`` filled with free loopback ports where the edge runs."""
    if not s.edge or s.inner_ports:
        return s
    ports = free_loopback_ports(5)
    if not s.openai_port:  # no front: neither its HTTP port nor its gRPC proxy
        ports[3] = ports[4] = 0
    return replace(s, inner_ports=",".join(map(str, ports)))


def free_loopback_ports(n: int, lowest: int = 20000) -> list[int]:
    """``n`` distinct loopback ports free now, drawn below the kernel's ephemeral range: a port the
    kernel hands out for port 0 comes from that range, where any outgoing connection may take it
    before tritonserver binds it (seen as "Socket already in use" while tests connected around)."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    top = ephemeral if ephemeral - lowest >= 1000 else 65536
    rng = random.SystemRandom()
    ports: list[int] = []
    while len(ports) < n:
        port = rng.randrange(lowest, top)
        if port in ports:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


def edge_dir(s: Settings) -> Path:
    return s.build.resolve() / "edge"


def _listen(s: Settings, port: int, extra: str = "") -> str:
    host = "[::]" if s.host == "::" else s.host
    return f"listen {host}:{port}{extra} backlog=4096;"


def _http_error(status: int, message: str, openai: bool) -> str:
    """An error answered by the edge itself, in the form the port's clients parse."""
    if openai:
        kind = {413: "BadRequestError", 404: "NotFoundError"}.get(status, "ServiceUnavailableError")
        body = f'{{"error": {{"message": "{message}", "type": "{kind}", "param": null, "code": {status}}}}}'
    else:
        body = f'{{"error": "{message}"}}'
    return f"default_type application/json; return {status} '{body}';"


def render_config(s: Settings) -> str:
    """nginx.conf for ``s`` (its ``inner_ports`` filled)."""
    inner = s.inner
    limit = s.resolved_max_request_bytes
    header_s = max(1, round(s.edge_header_timeout_s))
    upstream_s = max(1, round(s.edge_upstream_timeout_s))
    too_large = f"request body larger than the limit of {limit} bytes (MAX_REQUEST_BYTES)"
    unavailable = "tritonserver is not ready (starting or restarting); retry"
    d = edge_dir(s)
    user = "user root root;" if os.geteuid() == 0 else ""  # as root nginx would drop to nobody
    http_servers = []
    for port, upstream, openai in ((s.http_port, "triton_http", False), (s.openai_port, "front", True)):
        if not port:
            continue
        generate = ""
        # Triton answers a 500 to an /infer body its JSON reader fails on: the request goes once
        # more, to the front, which names the client's error (a 400) or says it was the server's.
        infer_500 = "\n            error_page 500 = @infer_check;" if s.openai_port else ""
        infer_check = (
            f"""
        location @infer_check {{
            rewrite ^ {INFER_CHECK_PATH} break;
            proxy_pass http://front;
        }}"""
            if s.openai_port
            else ""
        )
        if upstream == "front":  # the check is the edge's alone
            generate = f"""
        location = {INFER_CHECK_PATH} {{ {_http_error(404, "Not Found", openai)} }}"""
        if upstream == "triton_http":
            # Triton answers /infer on a decoupled model with a 501: the client's error, said as one.
            generate = f"""
        location ~ {INFER_PATHS} {{
            proxy_pass http://triton_http;
            proxy_read_timeout {upstream_s}s;
            proxy_send_timeout {upstream_s}s;
            proxy_intercept_errors on;
            error_page 413 = @too_large;
            error_page 502 = @unavailable;
            error_page 501 = @decoupled;{infer_500}
        }}
        location @decoupled {{ {_http_error(400, DECOUPLED, openai)} }}{infer_check}"""
        if upstream == "triton_http" and s.openai_port:
            generate += f"""
        location ~ {GENERATE_PATHS} {{
            proxy_pass http://front;
            proxy_read_timeout {upstream_s}s;
            proxy_send_timeout {upstream_s}s;
        }}"""
        http_servers.append(f"""
    server {{
        {_listen(s, port)}
        error_page 413 = @too_large;
        error_page 502 503 = @unavailable;
        location / {{
            proxy_pass http://{upstream};
            proxy_read_timeout {upstream_s}s;
            proxy_send_timeout {upstream_s}s;
        }}{generate}
        location @too_large {{ {_http_error(413, too_large, openai)} }}
        location @unavailable {{ {_http_error(503, unavailable, openai)} }}
    }}""")
    front_upstream = f"upstream front {{ server 127.0.0.1:{inner.front}; keepalive 64; }}" if s.openai_port else ""
    # The front's proxy takes the gRPC streams (it stops the generations of a client that leaves).
    stream_upstream = "front_grpc" if s.openai_port and inner.front_grpc else "triton_grpc"
    if stream_upstream == "front_grpc":
        front_upstream += f"\n    upstream front_grpc {{ server 127.0.0.1:{inner.front_grpc}; keepalive 64; }}"
    return f"""# Rendered by launcher/edge.py from the launcher's settings; edits are overwritten.
{user}
worker_processes 1;
worker_rlimit_nofile 16384;
pid {d / "nginx.pid"};
error_log {d / "error.log"} crit;
daemon off;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    server_tokens off;
    client_body_temp_path {d / "body"};
    proxy_temp_path {d / "proxy"};
    fastcgi_temp_path {d / "fastcgi"};
    uwsgi_temp_path {d / "uwsgi"};
    scgi_temp_path {d / "scgi"};
    client_header_timeout {header_s}s;
    client_body_timeout {header_s}s;
    keepalive_timeout {max(1, round(s.edge_idle_timeout_s))}s;
    send_timeout {upstream_s}s;
    reset_timedout_connection on;
    # A refused connection is read (and dropped) a while before it closes, so that the client gets
    # the answer; no longer than a header may take.
    lingering_time {header_s}s;
    lingering_timeout {min(header_s, 5)}s;
    client_max_body_size {limit};
    client_body_buffer_size 1m;
    keepalive_requests 100000;
    http2_max_concurrent_streams 1024;
    # Headers with underscores are dropped (nginx's default, kept on purpose: triton_grpc_error).
    ignore_invalid_headers on;
    # Triton's answers stream through as they come (generate_stream, gRPC streams); a client that
    # leaves closes the request upstream (proxy_ignore_client_abort off, nginx's default).
    proxy_buffering off;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    map $uri $infer_model {{ "~^/v2/models/(?<m>[^/]+)/" $m; default ""; }}
    upstream triton_http {{ server 127.0.0.1:{inner.http}; keepalive 64; }}
    upstream triton_grpc {{ server 127.0.0.1:{inner.grpc}; keepalive 64; }}
    upstream triton_metrics {{ server 127.0.0.1:{inner.metrics}; }}
    {front_upstream}
{"".join(http_servers)}
    server {{
        {_listen(s, s.grpc_port, " http2")}
        error_page 413 = @too_large;
        error_page 502 503 = @unavailable;
        location / {{
            grpc_pass grpc://triton_grpc;
            grpc_set_header triton_grpc_error "";
            grpc_read_timeout {upstream_s}s;
            grpc_send_timeout {upstream_s}s;
        }}
        location = {STREAM_METHOD} {{
            grpc_pass grpc://{stream_upstream};
            grpc_set_header triton_grpc_error "";
            client_max_body_size 0;
            # A stream's client sends nothing while it waits for its answers.
            client_body_timeout {upstream_s}s;
            grpc_read_timeout {upstream_s}s;
            grpc_send_timeout {upstream_s}s;
        }}
        location @too_large {{
            default_type application/grpc;
            add_header grpc-status 8 always;
            add_header grpc-message "{too_large}" always;
            return 204;
        }}
        location @unavailable {{
            default_type application/grpc;
            add_header grpc-status 14 always;
            add_header grpc-message "{unavailable}" always;
            return 204;
        }}
    }}
    server {{
        {_listen(s, s.metrics_port)}
        location / {{ proxy_pass http://triton_metrics; }}
    }}
}}
"""


def write_config(s: Settings) -> Path:
    d = edge_dir(s)
    d.mkdir(parents=True, exist_ok=True)
    conf = d / "nginx.conf"
    conf.write_text(render_config(s))
    return conf


def start_edge(s: Settings) -> subprocess.Popen | None:
    """nginx for ``s`` (None when the edge is off), its config checked first."""
    if not s.edge:
        return None
    conf = write_config(s)
    d = edge_dir(s)
    cmd = [nginx_binary(), "-p", str(d), "-e", str(d / "error.log"), "-c", str(conf)]
    check = subprocess.run([*cmd, "-t", "-q"], capture_output=True, text=True)
    if check.returncode != 0:
        raise SystemExit(f"the edge's nginx config {conf} does not load:\n{check.stderr}")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)


def quit_edge(proc: subprocess.Popen | None, timeout_s: float) -> None:
    """nginx's graceful stop (SIGQUIT): no new connections, in-flight requests finished."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGQUIT)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def stop_edge(s: Settings) -> None:
    """End this folder's nginx, were its supervisor killed hard."""
    pid_file = edge_dir(s) / "nginx.pid"
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if b"nginx" in cmdline and str(edge_dir(s)).encode() in cmdline:
        os.killpg(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
