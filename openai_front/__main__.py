"""``python -m openai_front --port 9000 --triton 127.0.0.1:8001 --model-dir DIR``

The launcher starts it beside tritonserver (``OPENAI_PORT``; 0 turns it off) and stops it with
the server; ``--server-pid`` makes it exit when that server does.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys


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
    a = ap.parse_args(argv)

    import uvicorn

    from .api_router import create_app
    from .body import DEFAULT_MAX_BODY_BYTES
    from .protocol import ModelCard

    card = ModelCard.from_model_dir(a.model_dir, a.served_model_name, a.max_model_len)
    app = create_app(card, a.triton, a.model_dir, a.max_body_bytes or DEFAULT_MAX_BODY_BYTES)
    server = uvicorn.Server(uvicorn.Config(app, host=a.host, port=a.port, log_level="warning", access_log=False))

    async def run() -> None:
        async def follow_server() -> None:
            while a.server_pid:
                try:
                    os.kill(a.server_pid, 0)
                except ProcessLookupError:
                    server.should_exit = True
                    return
                await asyncio.sleep(1)

        watcher = asyncio.ensure_future(follow_server())
        await server.serve()
        watcher.cancel()

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
