"""CLI: render a prompt or chat and print its ids, or generate text (streaming or not).

python -m client render "Hello world"
python -m client render --chat '[{"role":"user","content":"Hi"}]'
python -m client generate "The capital of France is" --max-tokens 20 --stream
python -m client --protocol grpc --url 127.0.0.1:8001 generate --chat '[...]'
"""

from __future__ import annotations

import argparse
import json
import sys

from .triton_client import RendererClient, RequestError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m client", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--protocol", choices=["http", "grpc"], default="http")
    ap.add_argument("--url", default=None, help="host:port (default 127.0.0.1:8000 http, :8001 grpc)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("render", "generate"):
        p = sub.add_parser(name)
        p.add_argument("prompt", nargs="?", help="prompt text (or use --chat / --ids)")
        p.add_argument("--chat", help="JSON array of OpenAI chat messages")
        p.add_argument("--ids", help="comma-separated prompt token ids")
        p.add_argument("--tokenize-params", help="JSON object")
        p.add_argument("--chat-params", help="JSON object")
        if name == "generate":
            p.add_argument("--max-tokens", type=int, default=64)
            p.add_argument("--stream", action="store_true")
            p.add_argument("--sampling-params", help="JSON object: temperature, top_p, top_k, seed, stop")
    a = ap.parse_args(argv)
    url = a.url or ("127.0.0.1:8001" if a.protocol == "grpc" else "127.0.0.1:8000")
    tok = json.loads(a.tokenize_params) if a.tokenize_params else None
    prompt: dict = {}
    if a.chat:
        prompt = {"messages": json.loads(a.chat), "tokenize_params": tok}
        if a.chat_params:
            prompt["chat_params"] = json.loads(a.chat_params)
    elif a.ids:
        prompt = {"prompt_token_ids": [int(x) for x in a.ids.split(",")], "tokenize_params": tok}
    elif a.prompt is not None:
        prompt = {"prompt": a.prompt, "tokenize_params": tok}
    else:
        ap.error("give a prompt, --chat or --ids")
    try:
        with RendererClient(url, a.protocol) as c:
            if a.cmd == "render":
                r = c.render_chat(**prompt) if a.chat else c.render_completion(**prompt)
                print(
                    json.dumps(
                        {
                            "input_ids": r.input_ids,
                            "token_offsets": r.token_offsets,
                            "rendered_prompt": r.rendered_prompt,
                        },
                        ensure_ascii=False,
                    )
                )
                return 0
            sampling = json.loads(a.sampling_params) if a.sampling_params else None
            model = "chat" if a.chat else "completion"
            for piece in c.generate(
                model, max_tokens=a.max_tokens, stream=a.stream, sampling_params=sampling, **prompt
            ):
                sys.stdout.write(piece.text)
                sys.stdout.flush()
            sys.stdout.write("\n")
            return 0
    except RequestError as e:
        print(f"{e.kind} error ({e.status or 'no status'}): {e.message}", file=sys.stderr)
        return 2 if e.is_client_error else 1


if __name__ == "__main__":
    sys.exit(main())
