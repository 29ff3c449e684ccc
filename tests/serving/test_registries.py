"""Replica schedulers and routers are picked by name from their registries: a second
policy is one class plus one registry entry, and an unknown name is one clear line."""

from __future__ import annotations

import math

import pytest
import yaml

from pipesim.cluster.inference import BatchShape
from pipesim.scenario.schema import ScenarioError
from pipesim.scenario.serving import load_serving, run_serving
from pipesim.serving.deployment import ServeConfig
from pipesim.serving.engine import simulate_serving
from pipesim.serving.recorder import Recorder
from pipesim.serving.replica import HandTypedCosts, ReplicaConfig
from pipesim.serving.request import Request
from pipesim.serving.router import ROUTERS
from pipesim.serving.scheduler import SCHEDULERS


class _Turn:
    """One iteration of the toy scheduler: a whole prompt, or one token of one request."""

    __slots__ = ("rid", "prefill")

    def __init__(self, rid: int, prefill: int) -> None:
        self.rid, self.prefill = rid, prefill

    @property
    def size(self) -> int:
        return 1

    def shape(self) -> BatchShape:
        if self.prefill:
            return BatchShape(self.prefill, self.prefill * self.prefill, 0, 0)
        return BatchShape(0, 0, 1, 1)


class OneAtATimeScheduler:
    """A toy policy: first come, first served, one request at a time to its last token
    (no batching, no KV cache limit)."""

    def __init__(self, config: ReplicaConfig, recorder: Recorder, replica: int, engine: int):
        self.recorder = recorder
        self.queue: list[list[int]] = []  # [rid, prompt, output, generated]
        self.last_token_s = math.nan

    @property
    def unfinished(self) -> int:
        return len(self.queue)

    @property
    def running_seqs(self) -> int:
        return 1 if self.queue else 0

    @property
    def kv_blocks_used(self) -> int:
        return 0

    def add(self, rid: int, prompt_tokens: int, output_tokens: int) -> None:
        self.queue.append([rid, prompt_tokens, output_tokens, 0])

    def schedule(self) -> _Turn | None:
        if not self.queue:
            return None
        rid, prompt, _, generated = self.queue[0]
        return _Turn(rid, 0 if generated else prompt)

    def started(self, batch: _Turn, start_s: float, exit_s: float) -> None:
        if batch.prefill:
            self.recorder.first_scheduled_s[batch.rid] = start_s

    def complete(self, batch: _Turn, exit_s: float) -> int:
        head, rec = self.queue[0], self.recorder
        head[3] += 1
        if batch.prefill:
            rec.first_token_s[batch.rid] = exit_s
        else:
            rec.gap(exit_s - self.last_token_s, 1)
            rec.longest_gap(batch.rid, exit_s - self.last_token_s)
        self.last_token_s = exit_s
        if head[3] < head[2]:
            return 0
        rec.finish_s[batch.rid] = exit_s
        self.queue.pop(0)
        return 1


class LastReplicaRouter:
    """A toy router: every request to the last replica."""

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas

    def assign(self) -> int:
        return self.replicas - 1

    def finished(self, replica: int) -> None:
        pass


@pytest.fixture
def toy_policies(monkeypatch):
    monkeypatch.setitem(SCHEDULERS, "one_at_a_time", OneAtATimeScheduler)
    monkeypatch.setitem(ROUTERS, "last_replica", LastReplicaRouter)


def scenario(tmp_path, **serving) -> str:
    (tmp_path / "two.csv").write_text(
        "arrival_s,prompt_tokens,output_tokens\n0.0,100,3\n0.0,100,3\n"
    )
    data = {
        "schema_version": 1,
        "name": "registry-test",
        "pipeline": {"devices": 1},
        "costs": {"prefill_ms": 10.0, "decode_ms": 1.0},
        "decode": {"tokens": 1, "prompt_tokens": 100},
        "serving": {"workload": {"arrival": "trace", "trace_file": "two.csv"}, **serving},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_the_default_scheduler_is_vllm_and_batches_both_prompts(tmp_path):
    built = load_serving(scenario(tmp_path))
    assert built.config.scheduler == "vllm"
    run = run_serving(built)
    # one prefill iteration of both prompts (200 tokens: 20 ms), then two decode steps
    assert run.result.requests.first_token_s.tolist() == pytest.approx([0.020, 0.020])
    assert run.result.requests.finish_s.tolist() == pytest.approx([0.022, 0.022])


def test_a_scheduler_registered_elsewhere_runs_a_deployment(tmp_path, toy_policies):
    built = load_serving(scenario(tmp_path, scheduler="one_at_a_time"))
    assert built.config.scheduler == "one_at_a_time"
    run = run_serving(built)
    records = run.result.requests
    # request 0: prefill 0-10 ms, two decode steps to 12 ms; request 1 waits for it
    assert records.first_scheduled_s.tolist() == pytest.approx([0.0, 0.012])
    assert records.first_token_s.tolist() == pytest.approx([0.010, 0.022])
    assert records.finish_s.tolist() == pytest.approx([0.012, 0.024])
    assert run.report.completed == 2
    assert run.report.tpot_ms.mean == pytest.approx(1.0)
    assert run.report.itl_ms.p99 == pytest.approx(1.0)


def test_a_registered_router_and_scheduler_run_through_the_engine(toy_policies):
    costs = HandTypedCosts((10.0,), (1.0,), 100)
    config = ServeConfig(
        ReplicaConfig(costs), replicas=2, router="last_replica", scheduler="one_at_a_time"
    )
    result = simulate_serving(config, [Request(0, 0.0, 100, 2), Request(1, 0.0, 100, 2)])
    assert result.requests.replica.tolist() == [1, 1]
    assert result.requests.finish_s.tolist() == pytest.approx([0.011, 0.022])


@pytest.mark.parametrize(
    "field, value, allowed",
    [
        ("scheduler", "sarathi", "vllm"),
        ("router", "random", "round_robin, least_outstanding"),
    ],
)
def test_an_unknown_name_is_one_line_naming_the_file_field_and_allowed_names(
    tmp_path, field, value, allowed
):
    path = scenario(tmp_path, **{field: value})
    expected = f"{path}: serving.{field}: unknown {field} '{value}'; allowed: {allowed}"
    with pytest.raises(ScenarioError) as caught:
        load_serving(path)
    assert str(caught.value).startswith(expected)


def test_the_engine_refuses_an_unknown_scheduler_naming_the_field():
    with pytest.raises(ValueError, match=r"^scheduler: must be one of vllm, got 'sarathi'"):
        ServeConfig(ReplicaConfig(HandTypedCosts((1.0,), (1.0,), 4)), scheduler="sarathi")
