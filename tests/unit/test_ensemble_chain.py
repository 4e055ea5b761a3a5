"""Every ensemble runs one step at a time (no server).

Triton 2.51's ensemble scheduler crashes tritonserver (SIGSEGV) when a step of a request fails
while a step that became ready beside it is still being scheduled: it decrements the request's
counter for the step it did not send, frees the client's request, then answers it
(docs/RELIABILITY.md, "Ensembles run one step at a time"). It cannot happen when no two steps are
ever ready together, so every ensemble of every repository the launcher renders must be a chain:
walked as the scheduler walks it (a step is ready once every tensor it reads exists), exactly one
step is ready at the start and each completed step makes at most one more ready. A decoupled step
may send many responses, each of which would schedule the steps after it again: it must be last.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.support.fake_triton import parse_config

# (image family, settings): the text repository, each image family's, and vLLM's engine's.
VARIANTS = {
    "text": (None, {}),
    "qwen2_vl": ("qwen2_vl", {}),
    "pixtral": ("pixtral", {}),
    "vllm engine": (None, {"llm_engine": "vllm"}),
}


def schedule(ensemble) -> list[list[str]]:
    """The steps Triton's ensemble scheduler makes ready together, wave by wave: the first wave
    from the ensemble's inputs (every optional one assumed sent, the case with most ready), each
    later one from the outputs of the step completed before it."""
    steps = list(ensemble.ensemble_scheduling.step)
    have = {t.name for t in ensemble.input}
    pending = list(range(len(steps)))
    waves: list[list[str]] = []
    while pending:
        ready = [i for i in pending if set(steps[i].input_map.values()) <= have]
        waves.append([steps[i].model_name for i in ready])
        if not ready:
            break
        for i in ready:
            pending.remove(i)
            have |= set(steps[i].output_map.values())
    return waves


def ensembles(repo):
    configs = {p.parent.name: parse_config(p) for p in sorted(repo.glob("*/config.pbtxt"))}
    decoupled = {n for n, c in configs.items() if c.model_transaction_policy.decoupled}
    return {n: c for n, c in configs.items() if c.platform == "ensemble"}, decoupled


@pytest.fixture(scope="module", params=list(VARIANTS))
def rendered(request, tmp_path_factory):
    from launcher import cli as launch
    from launcher import repository

    family, settings = VARIANTS[request.param]
    s = replace(
        launch.Settings(), build_dir=str(tmp_path_factory.mktemp("chain")), mm_instance_kind="KIND_CPU", **settings
    )
    return repository.render_repository(s, family)


def test_every_ensemble_is_a_chain(rendered):
    found, decoupled = ensembles(rendered)
    assert {"completion", "chat", "render_chat", "render_completion", "ensemble"} <= set(found)
    for name, cfg in found.items():
        waves = schedule(cfg)
        assert all(len(w) == 1 for w in waves), f"{name}: steps ready together: {waves}"
        assert sum(len(w) for w in waves) == len(cfg.ensemble_scheduling.step), f"{name}: a step never runs: {waves}"
        order = [w[0] for w in waves]
        assert not set(order[:-1]) & decoupled, f"{name}: a decoupled step is not last: {order}"


def test_the_check_sees_steps_ready_together():
    """The pre-fix ``completion`` (tokenize and generation_params both read only the ensemble's
    inputs) has two steps ready together; chained by a tensor, one."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    def ensemble(steps: str):
        return text_format.Parse(
            'name: "e" platform: "ensemble" input [ { name: "prompt" data_type: TYPE_STRING dims: [ 1 ] },'
            ' { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] } ] ensemble_scheduling { ' + steps + " }",
            model_config_pb2.ModelConfig(),
        )

    tokenize = 'step [ { model_name: "tokenize" input_map { key: "prompt" value: "prompt" } output_map { key: "input_ids" value: "_ids" } }'
    parallel = ensemble(
        tokenize + ', { model_name: "generation_params" input_map { key: "max_tokens" value: "max_tokens" }'
        ' output_map { key: "request_output_len" value: "_len" } },'
        ' { model_name: "detokenize" input_map { key: "input_ids" value: "_ids" }'
        ' input_map { key: "request_output_len" value: "_len" } output_map { key: "text_output" value: "text_output" } } ]'
    )
    assert schedule(parallel) == [["tokenize", "generation_params"], ["detokenize"]]
    chained = ensemble(
        tokenize + ', { model_name: "generation_params" input_map { key: "max_tokens" value: "max_tokens" }'
        ' input_map { key: "input_ids" value: "_ids" } output_map { key: "request_output_len" value: "_len" } } ]'
    )
    assert schedule(chained) == [["tokenize"], ["generation_params"]]
