"""Triton model ``llm`` when LLM_ENGINE=vllm (``default_model_filename`` in config.vllm.pbtxt):
vLLM's ``AsyncLLM`` behind the ``tensorrt_llm`` interface, in model_repository/llm/1/vllm_engine.py.

The stub runs in vLLM's environment with an isolated Python (PYTHONPATH ignored), so the project
root comes from the model config before anything of the project is imported.
"""

import json
import os
import sys


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        root = json.loads(args["model_config"])["parameters"]["project_root"]["string_value"]
        if root not in sys.path:
            sys.path.insert(0, root)
        here = os.path.dirname(os.path.abspath(__file__))
        if here not in sys.path:
            sys.path.insert(0, here)
        from vllm_engine import VllmEngineModel

        self._engine = VllmEngineModel()
        self._engine.initialize(args)

    async def execute(self, requests: list) -> list:
        return await self._engine.execute(requests)

    def finalize(self) -> None:
        self._engine.finalize()
