"""The planner's result rows as typed records, and the planner's state owned by each run."""

from __future__ import annotations

import dataclasses
import json

import pytest

import pipesim.analysis.plan.score as score_module
from pipesim.analysis.plan import AXIS_ATTRIBUTES, METRICS, PlanRow, plan
from tests.analysis.test_plan import SOURCE, small_base

ONE_CANDIDATE = (
    "pipeline.schedule=1f1b",
    "parallel.tensor=2",
    "pipeline.devices=2",
    "model.recompute=false",
    "parallel.zero_stage=1",
    "model.partition=even",
    "pipeline.microbatch_size=1",
    "parallel.dp_overlap=false",
    "parallel.tp_overlap=true",
)

# The row ``pipesim plan --format json`` printed for ONE_CANDIDATE when rows were dicts (the
# timings since GEMMs are priced by shape, collectives as NCCL runs them and the cost model
# refitted on the ledger, issue 19).
PRINTED = {
    "parallel.tensor": 2,
    "pipeline.devices": 2,
    "parallel.data": 2,
    "pipeline.schedule": "1f1b",
    "pipeline.virtual_stages": 1,
    "pipeline.microbatch_size": 1,
    "pipeline.microbatches": 16,
    "model.recompute": False,
    "parallel.zero_stage": 1,
    "model.partition": "even",
    "parallel.sequence_parallel": False,
    "parallel.dp_overlap": False,
    "parallel.tp_overlap": True,
    "step_time_ms": 2982.93526375027,
    "tokens_per_second": 43940.61164948341,
    "mfu": 0.5533715684839903,
    "peak_memory_bytes": 20388786995.2,
    "bubble_fraction": 0.09670135335826902,
    "evaluator": "fast",
    "peak_memory_bytes_per_device": [20388786995.2, 17159487488.0],
}


@pytest.fixture(scope="module")
def one() -> object:
    return plan(small_base(), SOURCE, 8, ONE_CANDIDATE, top=3, confirm=0)


def test_a_row_is_the_dict_the_json_had_key_for_key_and_bit_for_bit(one):
    (row,) = one.results
    assert isinstance(row, PlanRow)
    data = row.to_dict()
    assert data == PRINTED
    assert list(data) == [*AXIS_ATTRIBUTES, *METRICS, "evaluator", "peak_memory_bytes_per_device"]
    assert isinstance(data["evaluator"], str)  # an Evaluator, which prints as its name
    assert [type(v) for k, v in data.items() if k != "evaluator"] == [
        type(v) for k, v in PRINTED.items() if k != "evaluator"
    ]
    printed = json.dumps(one.to_dict(), indent=2)
    assert json.dumps(PRINTED, indent=2).replace("\n", "\n    ") in printed


def test_a_row_round_trips_through_its_json(one):
    (row,) = one.results
    again = PlanRow.from_dict(json.loads(json.dumps(row.to_dict())))
    assert again == row
    assert again.to_dict() == row.to_dict()


def test_a_row_is_a_frozen_slotted_record(one):
    (row,) = one.results
    assert PlanRow.__dataclass_params__.frozen and hasattr(PlanRow, "__slots__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.step_time_ms = 0.0
    assert hash(row) == hash(PlanRow.from_dict(row.to_dict()))


def test_two_plans_in_one_process_share_no_scorer_state(monkeypatch):
    """Each run scores with Scorers of its own: the second derives its stage costs again
    rather than finding the first run's caches (nothing is kept at module level)."""
    made, derived = [], []
    real_init, real_costs = score_module.Scorer.__init__, score_module.derive.model_costs

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        made.append(self)

    def model_costs(*args, **kwargs):
        derived.append(args[0])
        return real_costs(*args, **kwargs)

    monkeypatch.setattr(score_module.Scorer, "__init__", init)
    monkeypatch.setattr(score_module.derive, "model_costs", model_costs)
    first = plan(small_base(), SOURCE, 8, ONE_CANDIDATE, confirm=0).to_dict()
    after_first = len(derived)
    second = plan(small_base(), SOURCE, 8, ONE_CANDIDATE, confirm=0).to_dict()
    assert len(made) == 2 and made[0] is not made[1]
    assert after_first > 0 and len(derived) == 2 * after_first
    first.pop("wall_s"), second.pop("wall_s")
    assert first == second
    held = [
        name
        for name, value in vars(score_module).items()
        if isinstance(value, dict) and any(v in made for v in value.values())
    ]
    assert held == []  # no Scorer outlives its run in a module-level table
