"""Client library and CLI for the renderer ensembles (``python -m client --help``)."""

# The project's one version: pyproject.toml reads it (setuptools' dynamic version), the HTTP
# front's ``/version`` answers it.
__version__ = "0.1.0"

from .triton_client import (
    ErrorKind,
    Generated,
    Rendered,
    RendererClient,
    RequestError,
    error_kind,
    grpc_http_status,
    stream_error_kind,
    strip_ensemble_prefix,
    triton_check_kind,
)

__all__ = [
    "__version__",
    "ErrorKind",
    "Generated",
    "Rendered",
    "RendererClient",
    "RequestError",
    "error_kind",
    "grpc_http_status",
    "stream_error_kind",
    "strip_ensemble_prefix",
    "triton_check_kind",
]
