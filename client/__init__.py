"""Client library and CLI for the renderer ensembles (``python -m client --help``)."""

from .triton_client import (
    ErrorKind,
    Generated,
    Rendered,
    RendererClient,
    RequestError,
    error_kind,
    stream_error_kind,
    strip_ensemble_prefix,
    triton_check_kind,
)

__all__ = [
    "ErrorKind",
    "Generated",
    "Rendered",
    "RendererClient",
    "RequestError",
    "error_kind",
    "stream_error_kind",
    "strip_ensemble_prefix",
    "triton_check_kind",
]
