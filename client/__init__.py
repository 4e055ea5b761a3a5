"""Client library and CLI for the renderer ensembles (``python -m client --help``)."""

from .triton_client import Generated, Rendered, RendererClient, RequestError

__all__ = ["Generated", "Rendered", "RendererClient", "RequestError"]
