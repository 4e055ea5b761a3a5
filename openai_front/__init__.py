"""An OpenAI- and vLLM-compatible HTTP front over the ensembles (``python -m openai_front``).

A light process (no model, no tokenizer) that speaks OpenAI's ``/v1/chat/completions`` and
``/v1/completions`` (streaming or not), vLLM's render endpoints and ``/tokenize`` /
``/detokenize``, ``/v1/models`` (and ``/v1/models/{id}``), ``/health``, ``/version`` and its own
``/metrics``, and forwards every request to the Triton ensembles
over gRPC: the ensembles render, the engine generates; the front only translates.

- ``protocol.py``: an OpenAI / vLLM request body -> the ensemble's tensors, with vLLM's defaults;
- ``responses.py``: what the ensembles returned -> OpenAI's and vLLM's response bodies;
- ``triton.py``: the asyncio gRPC client of the ensembles (cancellation included);
- ``serving.py``: each endpoint's work (``FrontService``), over the ensembles, without HTTP;
- ``api_router.py``: the FastAPI routes, thin calls into the service, and OpenAI-shaped errors.
- ``metrics.py``: the front's Prometheus counters and latency histogram, kept by an ASGI middleware.
"""
