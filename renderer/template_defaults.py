"""Default bounds on request-supplied chat templates, written once for the renderer and the
launcher's settings (``renderer/chat/template_worker.py`` enforces them). Kept free of heavy
imports: the launcher reads it."""

DEFAULT_TIMEOUT_S = 2.0
DEFAULT_MEMORY_MB = 512
DEFAULT_MAX_BYTES = 64 * 1024
DEFAULT_RECYCLE_RSS_MB = 128
