"""``python -m openai_front --port 9000 --triton 127.0.0.1:8001 --model-dir DIR``

The launcher starts it beside tritonserver (``OPENAI_PORT``; 0 turns it off) and stops it with
the server; ``--server-pid`` makes it exit when that server does. ``--grpc-port`` serves, beside it
in the same process, the gRPC proxy for ``ModelStreamInfer`` that the edge sends streams to
(``grpc_proxy.py``: a stream's client that leaves stops its generations).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

# How long streams still running when the front stops may go on; then they are cancelled (and
# their generations stopped), within the launcher's wait for the front to end.
PROXY_GRACE_S = 2.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9000)
    ap.add_argument("--triton", default="127.0.0.1:8001", help="the Triton server's gRPC address")
    ap.add_argument("--model-dir", required=True, help="the served model's folder (its JSON files only are read)")
    ap.add_argument("--served-model-name", default="", help="the model id clients send; default the folder's name")
    ap.add_argument("--max-model-len", type=int, default=0)
    ap.add_argument("--max-body-bytes", type=int, default=0, help="largest request body (default 64 MiB)")
    ap.add_argument("--server-pid", type=int, default=0, help="exit when this process does")
    ap.add_argument(
        "--grpc-port", type=int, default=0, help="serve the ModelStreamInfer proxy on this port (0: no proxy)"
    )
    ap.add_argument(
        "--infer-check-path", default="", help="the route the edge sends /infer requests Triton answered 500 to"
    )
    a = ap.parse_args(argv)

    import uvicorn

    from .api_router import create_app
    from .body import DEFAULT_MAX_BODY_BYTES
    from .protocol import ModelCard

    card = ModelCard.from_model_dir(a.model_dir, a.served_model_name, a.max_model_len)
    app = create_app(
        card, a.triton, a.model_dir, a.max_body_bytes or DEFAULT_MAX_BODY_BYTES, infer_check_path=a.infer_check_path
    )
    server = uvicorn.Server(uvicorn.Config(app, host=a.host, port=a.port, log_level="warning", access_log=False))

    async def run() -> None:
        proxy = None
        if a.grpc_port:
            from .grpc_proxy import GrpcProxy

            proxy = GrpcProxy(a.triton, a.host, a.grpc_port)
            await proxy.start()  # before the HTTP app: a port it cannot bind ends the front at once

        async def follow_server() -> None:
            while a.server_pid:
                try:
                    os.kill(a.server_pid, 0)
                except ProcessLookupError:
                    server.should_exit = True
                    return
                await asyncio.sleep(1)

        watcher = asyncio.ensure_future(follow_server())
        try:
            await server.serve()
        finally:
            watcher.cancel()
            if proxy is not None:
                await proxy.stop(PROXY_GRACE_S)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
