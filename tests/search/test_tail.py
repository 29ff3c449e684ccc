"""The end-of-step tail in the search: with the all-reduce overlapped (dp_overlap), the
order that lets the device with the long reduction finish early wins, even though its
pipeline flushes later; and a model scenario's search counts the tail and the model's
unequal stage costs exactly as the engine runs them."""

from pathlib import Path

import pytest

from pipesim.analysis.run import run_scenario
from pipesim.scenario.build import load_scenario
from pipesim.search import search_schedule
from pipesim.search.auto import evaluate
from pipesim.search.exact import exact_schedule
from pipesim.search.tail import Tail
from pipesim.sim.costs import uniform_costs

# Two devices, two microbatches. Stage 0: F 3, I 1, W 1; stage 1: F 1, I 1, W 2 (ms).
# Device 1 waits for F(1,1) from 5 to 6 (it arrives when F(0,1) ends at 6).
#   A: device 1 fills that wait with W(1,0) [5,7], then F(1,1) [7,8], I(1,1) [8,9],
#      W(1,1) [9,11]; device 0 runs I(0,0) [6,7], W(0,0) [7,8], I(0,1) [9,10], W(0,1)
#      [10,11]. Both end at 11, the least device 1's work allows (3 + 2 x 4): the
#      fastest pipeline.
#   B: device 1 waits, then F(1,1) [6,7], I(1,1) [7,8], W(1,0) [8,10], W(1,1) [10,12];
#      device 0 gets its last gradient an ms earlier: I(0,1) [8,9], W(0,1) [9,10], ends at
#      10. The pipeline flushes at 12.
# With a 3 ms all-reduce on device 0 that starts when device 0's last action ends, A
# ends its step at 11 + 3 = 14 and B at max(10 + 3, 12) = 13; and no order does better,
# as device 0 cannot end before I(1,1) ends at 8 at the earliest, plus I(0,1) and W(0,1).
COSTS = uniform_costs(
    2,
    [3.0, 1.0],
    backward_input_ms=1.0,
    backward_weight_ms=[1.0, 2.0],
    activation_memory_bytes=1.0,
    weight_grad_memory_bytes=0.5,
)
OVERLAPPED = Tail((3.0, 0.0), after_flush=False)


def test_finishing_the_reducing_device_early_changes_the_winner():
    plain = search_schedule("zb-auto", 2, 2, COSTS, memory_limit_bytes=2.0)
    assert plain.makespan_ms == 11.0
    assert [str(a) for a in plain.schedule.device_actions[1]][:4] == ["1F0", "1I0", "1W0", "1F1"]
    assert evaluate(plain.schedule, COSTS, None, "", OVERLAPPED).makespan_ms == 14.0
    tailed = search_schedule("zb-auto", 2, 2, COSTS, memory_limit_bytes=2.0, tail=OVERLAPPED)
    assert tailed.makespan_ms == 13.0
    assert [str(a) for a in tailed.schedule.device_actions[1]] == [
        "1F0",
        "1I0",
        "1F1",
        "1I1",
        "1W0",
        "1W1",
    ]
    assert tailed.lower_bound_ms == pytest.approx(13.0)  # device 0's own floor + its tail
    assert tailed.lower_bound_part == "work of device 0, then its own all-reduce"
    exact = exact_schedule("zb-auto", 2, 2, COSTS, None, 2.0, tail=OVERLAPPED)
    assert exact.optimal and exact.makespan_ms == 13.0


def test_after_the_flush_the_tail_adds_the_longest():
    found = search_schedule("zb-auto", 2, 2, COSTS, None, 2.0, tail=Tail((3.0, 0.0)))
    assert found.makespan_ms == 11.0 + 3.0
    assert found.lower_bound_ms == pytest.approx(14.0)
    assert Tail((3.0, 0.0)).step_ms([11.0, 11.0]) == 14.0
    assert OVERLAPPED.step_ms([10.0, 12.0]) == 13.0


SCENARIO = """\
schema_version: 1
name: model-searched
pipeline: {schedule: zb-auto, devices: 4, microbatch_size: 1}
model: {layers: 6, hidden: 1024, heads: 16, seq_len: 1024, vocab: 32000, global_batch: 16}
parallel: {data: 4, dp_overlap: true}
hardware: {gpu: h100-sxm, gpus_per_node: 8, intra_node_link: nvlink4, inter_node_link: ib-ndr}
"""


def test_a_model_scenario_searches_with_its_stage_costs_and_tail(tmp_path: Path):
    path = tmp_path / "model.yaml"
    path.write_text(SCENARIO)
    scenario = load_scenario(path)
    costs = scenario.costs
    assert len(set(costs.forward_ms)) > 1  # embedding and LM head: unequal stages
    assert scenario.tail_ms is not None and not scenario.tail_after_flush
    tail = Tail(scenario.tail_ms, False, scenario.optimizer_ms)
    again = search_schedule(
        "zb-auto", 4, scenario.schedule.microbatches, costs, scenario.topology, tail=tail
    )
    assert scenario.search.makespan_ms == again.makespan_ms
    assert scenario.schedule.device_actions == again.schedule.device_actions
    report = run_scenario(scenario).report
    assert report.makespan_ms == pytest.approx(scenario.search.makespan_ms, rel=1e-12)
    microbatches = scenario.schedule.microbatches
    without = search_schedule("zb-auto", 4, microbatches, costs, scenario.topology)
    assert scenario.search.lower_bound_ms > without.lower_bound_ms  # the tail lifts it
