"""torch's schedule CSV in all its forms: golden files torch wrote, the post rules, and
byte-for-byte agreement with torch's own writer and parser (those need torch)."""

import importlib.util
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from pipesim.analysis.run import run_scenario
from pipesim.cli import main
from pipesim.scenario.build import ScenarioError, load_scenario
from pipesim.schedules import POLICIES, fit_virtual_stages, get_schedule
from pipesim.schedules.ir import Action, B, F, ScheduleError, parse_action, to_csv
from pipesim.schedules.posts import RECV_F, REDUCE_GRAD, SEND_B, SEND_F, UNSHARD, Post
from pipesim.schedules.torch_csv import read_torch_csv, to_torch_csv
from pipesim.schedules.validity import validate
from pipesim.sim.costs import uniform_costs
from pipesim.sim.engine import DeadlockError, simulate
from pipesim.sim.links import Link, Topology
from pipesim.sim.memory import memory_timelines

GOLDEN = Path(__file__).parent / "golden"
TORCH_FILES = sorted(p.name for p in GOLDEN.glob("torch-*.csv"))
BROKEN_BY_TORCH = {"torch-1f1b_p3_m4.csv"}  # see test_torch_1f1b_order_is_malformed
LOWERED = [n for n in TORCH_FILES if n.endswith(".lowered.csv")]


def raw(name: str) -> str:
    return (GOLDEN / name).read_bytes().decode()


def without_idle_cells(text: str) -> str:
    """torch's file with its empty (idle-step) cells dropped, row ends kept."""
    rows = text.split("\r\n")
    return "\r\n".join(",".join(c for c in row.split(",") if c) for row in rows)


# ---------------------------------------------------------------------------
# Golden files written by torch 2.13 (tests/schedules/golden/generate.py)


@pytest.mark.parametrize("name", [n for n in TORCH_FILES if n not in BROKEN_BY_TORCH])
def test_torch_files_import_and_write_back_unchanged(name):
    schedule = read_torch_csv(raw(name), name)
    validate(schedule)
    assert to_torch_csv(schedule) == without_idle_cells(raw(name))


@pytest.mark.parametrize("name", LOWERED)
def test_lowered_form_holds_the_compute_only_order(name):
    lowered = read_torch_csv(raw(name))
    compute_only = name.replace("-deferred", "").replace(".lowered", "")
    assert lowered.device_actions == read_torch_csv(raw(compute_only)).device_actions
    assert lowered.has_p2p_posts
    assert to_torch_csv(lowered, compute_only=True) == without_idle_cells(raw(compute_only))


def test_gpipe_compute_only_form_carries_reduce_grad():
    schedule = read_torch_csv(raw("torch-gpipe_p2_m3.csv"))
    assert [schedule.program(d)[-1] for d in range(2)] == [
        Post(0, REDUCE_GRAD),
        Post(1, REDUCE_GRAD),
    ]
    assert not schedule.has_p2p_posts
    assert schedule.posts == (((6, Post(0, REDUCE_GRAD)),), ((6, Post(1, REDUCE_GRAD)),))


def test_lowered_posts_sit_where_torch_put_them():
    schedule = read_torch_csv(raw("torch-zbv_p2_m4_v2.lowered.csv"))
    assert [str(item) for item in schedule.program(1)[:6]] == [
        "1UNSHARD",
        "2UNSHARD",
        "1RECV_F0",
        "1F0",
        "1RECV_F1",
        "2F0",
    ]
    # stages 1 and 2 share rank 1 (V placement): 1F0 hands over to 2F0 without SEND/RECV
    assert Post(1, SEND_F, 0) not in [p for _, p in schedule.posts[1]]


def test_torch_1f1b_order_is_malformed():
    # torch 2.13's Schedule1F1B._get_pipeline_order starts the last rank's forwards at
    # microbatch 1 and ends them at microbatch m (2F1..2F4 for m=4): its CSV cannot run.
    assert "2F4" in raw("torch-1f1b_p3_m4.csv") and "2F0" not in raw("torch-1f1b_p3_m4.csv")
    with pytest.raises(ScheduleError, match=r"microbatches \[4\] run stages 2\.\.2"):
        read_torch_csv(raw("torch-1f1b_p3_m4.csv"))


# ---------------------------------------------------------------------------
# Reading cells


@pytest.mark.parametrize(
    "cell, message",
    [
        ("1SEND_F", r"row 2, column 1: '1SEND_F': SEND_F names a microbatch, e.g. 1SEND_F0"),
        ("1REDUCE_GRAD0", r"row 2, column 1: '1REDUCE_GRAD0': REDUCE_GRAD names a stage only"),
        ("1SEND_X0", r"row 2, column 1: cannot parse action '1SEND_X0'.*2RECV_B0"),
    ],
)
def test_bad_cells_name_row_and_column(cell, message):
    with pytest.raises(ScheduleError, match=message):
        read_torch_csv(f"0F0,0B0\n{cell},1F0,1B0\n")


def test_a_compute_only_file_has_no_posts():
    schedule = read_torch_csv("0F0,,0B0\r\n,1F0,1B0\r\n")
    assert schedule.posts == () and not schedule.has_p2p_posts
    assert to_torch_csv(schedule) == "0F0,0B0\r\n1F0,1B0\r\n"


# ---------------------------------------------------------------------------
# The post rules, on a two-rank lowered schedule

GOOD = [
    "0F0,0SEND_F0,0RECV_B0,0B0,0REDUCE_GRAD",
    "1RECV_F0,1F0,1B0,1SEND_B0,1REDUCE_GRAD",
]


def lowered(rank0: str = GOOD[0], rank1: str = GOOD[1]):
    return read_torch_csv(f"{rank0}\r\n{rank1}\r\n")


def test_a_well_formed_lowered_schedule_passes():
    schedule = lowered()
    validate(schedule)
    assert schedule.program(0) == [
        Action(0, F, 0),
        Post(0, SEND_F, 0),
        Post(0, "RECV_B", 0),
        Action(0, B, 0),
        Post(0, REDUCE_GRAD),
    ]


@pytest.mark.parametrize(
    "rank0, rank1, message",
    [
        (
            GOOD[0],
            "1F0,1RECV_F0,1B0,1SEND_B0,1REDUCE_GRAD",
            "rank 1 step 1: 1RECV_F0: posted after 1F0, which needs what it receives",
        ),
        (
            "0SEND_F0,0F0,0RECV_B0,0B0,0REDUCE_GRAD",
            GOOD[1],
            "rank 0 step 0: 0SEND_F0: posted before 0F0, whose output it sends",
        ),
        (GOOD[0], "1F0,1B0,1SEND_B0,1REDUCE_GRAD", r"missing posts: 1RECV_F0 \(rank 1\)"),
        (
            "0F0,0SEND_F0,0SEND_F0,0RECV_B0,0B0,0REDUCE_GRAD",
            GOOD[1],
            "rank 0 step 2: 0SEND_F0: appears twice",
        ),
        (
            GOOD[0],
            GOOD[1] + ",1SEND_F0",
            "1SEND_F0: stage 1 ends its pipeline: there is nothing to send",
        ),
        (
            "0F0,0SEND_F0,0RECV_B0,0REDUCE_GRAD,0B0",
            GOOD[1],
            "0REDUCE_GRAD: posted before 0B0, the stage's last backward",
        ),
        (GOOD[0], "1RECV_F0,1F0,1B0,1SEND_B0", r"missing posts: 1REDUCE_GRAD \(rank 1\)"),
        ("1UNSHARD," + GOOD[0], GOOD[1], "1UNSHARD: stage 1 is placed on device 1, not 0"),
        (
            GOOD[0],
            GOOD[1].replace("1RECV_F0,", "1RECV_F3,"),
            "1RECV_F3: microbatch 3 does not pass stage 1",
        ),
    ],
)
def test_broken_posts_are_marked_in_the_grid(rank0, rank1, message):
    with pytest.raises(ScheduleError, match=message) as info:
        validate(lowered(rank0, rank1))
    assert "<-- ERROR HERE" in str(info.value) or "missing posts" in str(info.value)


def test_the_grid_shows_the_posts_with_the_bad_one_marked():
    with pytest.raises(ScheduleError) as info:
        validate(lowered(rank1="1F0,1RECV_F0,1B0,1SEND_B0,1REDUCE_GRAD"))
    grid = str(info.value).splitlines()[1:]
    assert grid[0].split() == ["Rank", "0", "Rank", "1"]
    assert grid[2].split()[:4] == ["Step", "01", "0SEND_F0", ">>1RECV_F0<<"]
    assert grid[2].endswith(
        "<-- ERROR HERE: 1RECV_F0: posted after 1F0, which needs what it receives"
    )


def test_stages_on_one_rank_hand_over_without_send_and_recv():
    text = "0F0,0SEND_F0,1F0,1B0,0B0\r\n"
    with pytest.raises(ScheduleError, match="stages 0 and 1 share rank 0"):
        validate(read_torch_csv(text))
    validate(read_torch_csv(text.replace("0SEND_F0,", "")))


def test_fsdp_posts_alternate_and_guard_the_compute():
    schedule = read_torch_csv("0UNSHARD,0F0,0B0,0RESHARD,0UNSHARD,0RESHARD\r\n")
    validate(schedule)
    assert schedule.program(0)[0] == Post(0, UNSHARD)
    with pytest.raises(ScheduleError, match="0UNSHARD: unsharded twice"):
        validate(read_torch_csv("0UNSHARD,0UNSHARD,0F0,0B0\r\n"))
    with pytest.raises(
        ScheduleError, match=r"0B0 runs while stage 0 is sharded \(UNSHARD it first\)"
    ):
        validate(read_torch_csv("0UNSHARD,0F0,0RESHARD,0B0\r\n"))
    with pytest.raises(ScheduleError, match="0RESHARD: the stage is not unsharded"):
        validate(read_torch_csv("0F0,0B0,0RESHARD\r\n"))


def test_forward_only_schedules_post_no_gradients():
    with pytest.raises(ScheduleError, match="0SEND_B0: a forward-only schedule has no gradients"):
        validate(read_torch_csv("0F0,0SEND_B0\r\n"))


# ---------------------------------------------------------------------------
# Against torch itself


def torch_schedules():
    return pytest.importorskip("torch.distributed.pipelining.schedules")


def small(name):
    virtual = fit_virtual_stages(name, 1)
    return get_schedule(name, 2, 4, virtual)


@pytest.mark.torch
def test_golden_files_are_what_torch_writes_today(tmp_path):
    torch_schedules()
    spec = importlib.util.spec_from_file_location("generate", GOLDEN / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    written = generate.main(tmp_path)
    assert sorted(p.name for p in written) == TORCH_FILES
    for path in written:
        assert path.read_bytes() == (GOLDEN / path.name).read_bytes(), path.name


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_compute_only_export_is_byte_identical_to_torchs_writer(tmp_path, name):
    schedules = torch_schedules()
    schedule = small(name)
    order = {
        rank: [schedules._Action.from_str(str(a)) for a in actions]
        for rank, actions in enumerate(schedule.device_actions)
    }
    path = tmp_path / "torch.csv"
    schedules.PipelineScheduleMulti._dump_csv(SimpleNamespace(pipeline_order=order), str(path))
    torch_bytes = path.read_bytes().decode()
    assert to_torch_csv(schedule) == torch_bytes == to_csv(schedule, lineterminator="\r\n")
    assert read_torch_csv(torch_bytes, schedule.name) == schedule


@pytest.mark.torch
@pytest.mark.parametrize(
    "text",
    [
        "(0F7;7B3)OVERLAP_F_B",
        "(0F1)OVERLAP_F_B",
        "(2F0;5I1;6W0)OVERLAP_F_B",
        "(1B0;0F2)OVERLAP_F_B",
    ],
)
def test_groups_read_as_torch_reads_them(text):
    schedules = torch_schedules()
    theirs = schedules._Action.from_str(text)
    ours = parse_action(text)
    assert str(ours) == str(theirs) == text
    assert [str(a) for a in ours.atoms] == [str(a) for a in theirs.sub_actions]


SINGLE_CHAIN = sorted(n for n in POLICIES if n not in ("dualpipe", "chimera"))


@pytest.mark.torch
@pytest.mark.parametrize("name", SINGLE_CHAIN)
def test_torchs_lowering_of_every_policy_keeps_the_post_rules(name):
    """torch's own lowering passes on pipesim's orders give schedules the rules accept,
    whose every cell torch's parser reads back to the same text."""
    schedules = torch_schedules()
    schedule = small(name)
    order = {
        rank: schedules._add_reduce_grad(
            schedules._add_unshard_reshard([schedules._Action.from_str(str(a)) for a in actions]),
            schedule.microbatches,
        )
        for rank, actions in enumerate(schedule.device_actions)
    }
    order = schedules._add_send_recv(order, lambda s: schedule.placement[s], schedule.stages)
    text = "\r\n".join(",".join(str(a) for a in order[r]) for r in sorted(order)) + "\r\n"
    lowered = read_torch_csv(text, name)
    validate(lowered)
    assert lowered.device_actions == schedule.device_actions
    assert to_torch_csv(lowered) == text
    cells = [c for c in re.split(r"[,\r\n]+", text) if c]
    assert [str(schedules._Action.from_str(c)) for c in cells] == cells
    assert {p.kind for placed in lowered.posts for _, p in placed} >= {RECV_F, SEND_F, SEND_B}


# ---------------------------------------------------------------------------
# In the engine: hand-derived timelines (F = 1 ms, B = 2 ms)

LATE_RECV = [
    "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1",
    "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1",
]


def run(rows, topology=None, **cost_args):
    schedule = read_torch_csv("\r\n".join(rows) + "\r\n")
    costs = uniform_costs(schedule.model_stages, forward_ms=1, backward_ms=2, **cost_args)
    return simulate(schedule, costs, topology)


def timeline(trace):
    """[(device, name, start, end)] of every row, compute and communication, in time order."""
    frame = trace.frame
    rows = zip(frame.device, frame.name, frame.start, frame.end, strict=True)
    return sorted(
        ((int(d), n, float(s), float(e)) for d, n, s, e in rows), key=lambda r: (r[2], r[0], r[1])
    )


def test_a_receive_posted_late_delays_its_consumer():
    # 0.5 ms latency. Rank 1 posts 1RECV_F1 only after 1B0 ends (4.5), though 0F1's
    # activation could have left at 2 (0SEND_F1): it leaves at 4.5, arrives 5.0, and 1F1
    # waits for it. Without the posts it would have arrived at 2.5 and 1F1 run at 4.5.
    topology = Topology(2, default=Link(latency_us=500))
    assert timeline(run(LATE_RECV, topology)) == [
        (0, "0F0", 0.0, 1.0),
        (0, "0F0->1", 1.0, 1.5),
        (0, "0F1", 1.0, 2.0),
        (1, "1F0", 1.5, 2.5),
        (1, "1B0", 2.5, 4.5),
        (0, "0F1->1", 4.5, 5.0),
        (1, "1B0->0", 4.5, 5.0),
        (0, "0B0", 5.0, 7.0),
        (1, "1F1", 5.0, 6.0),
        (1, "1B1", 6.0, 8.0),
        (1, "1B1->0", 8.0, 8.5),
        (0, "0B1", 8.5, 10.5),
    ]
    compute_only = read_torch_csv(
        to_torch_csv(read_torch_csv("\r\n".join(LATE_RECV)), compute_only=True)
    )
    assert simulate(compute_only, uniform_costs(2, 1, 2), topology).makespan_ms == 10.0


def test_a_send_posted_late_holds_the_transfer_back():
    # Ideal link: rank 0 posts both sends after both forwards (at 2), so 1F0 starts at 2.
    rows = ["0F0,0F1,0SEND_F0,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1", LATE_RECV[1]]
    assert [r for r in timeline(run(rows)) if r[0] == 1] == [
        (1, "1F0", 2.0, 3.0),
        (1, "1B0", 3.0, 5.0),
        (1, "1F1", 5.0, 6.0),
        (1, "1B1", 6.0, 8.0),
    ]
    assert run(rows).makespan_ms == 10.0


def test_reduce_grad_takes_each_stages_all_reduce_where_torch_put_it():
    # torch's GPipe order, m=3: each rank reduces its stage after its last backward.
    schedule = read_torch_csv(raw("torch-gpipe_p2_m3.csv"))
    costs = uniform_costs(2, 1, 2, reduce_grad_ms=[0.5, 0.25])
    reductions = [r for r in timeline(simulate(schedule, costs)) if r[1] == "gradient all-reduce"]
    assert reductions == [
        (1, "gradient all-reduce", 10.0, 10.25),
        (0, "gradient all-reduce", 12.0, 12.5),
    ]
    assert simulate(schedule, uniform_costs(2, 1, 2)).makespan_ms == 12.0  # none given: free


def test_reduce_grad_holds_the_device_until_the_reduction_ends():
    # One rank, two stages: 1REDUCE_GRAD (1 ms) runs between 1B0 and 0B0.
    rows = ["0F0,1F0,1B0,1REDUCE_GRAD,0B0,0REDUCE_GRAD"]
    assert [r[1:] for r in timeline(run(rows, reduce_grad_ms=1))] == [
        ("0F0", 0.0, 1.0),
        ("1F0", 1.0, 2.0),
        ("1B0", 2.0, 4.0),
        ("gradient all-reduce", 4.0, 5.0),
        ("0B0", 5.0, 7.0),
        ("gradient all-reduce", 7.0, 8.0),
    ]


def test_fsdp_posts_are_free_unless_given_a_cost():
    rows = ["0UNSHARD,1UNSHARD,0F0,1F0,1B0,1RESHARD,0B0,0RESHARD"]
    assert run(rows).makespan_ms == 6.0
    # Gathers run one after another on their own stream (stage 0: 0..1, stage 1: 1..4);
    # a stage's first compute waits for its gather, the device does not.
    compute = [r[1:] for r in timeline(run(rows, unshard_ms=[1, 3])) if "SHARD" not in r[1]]
    assert compute == [("0F0", 1.0, 2.0), ("1F0", 4.0, 5.0), ("1B0", 5.0, 7.0), ("0B0", 7.0, 9.0)]
    # A reshard holds the device for its cost.
    assert run(rows, reshard_ms=0.5).makespan_ms == 7.0


def test_torchs_lowered_forms_cost_nothing_more_on_ideal_links():
    # torch posts each SEND right after its producer and each RECV early, so with ideal
    # links the rendezvous never waits; with latency the deferred RECVs can.
    for name in LOWERED:
        lowered = read_torch_csv(raw(name))
        compute_only = read_torch_csv(to_torch_csv(lowered, compute_only=True))
        costs = uniform_costs(lowered.model_stages, 1, 2)
        assert simulate(lowered, costs).makespan_ms == simulate(compute_only, costs).makespan_ms
        slow = Topology(lowered.devices, default=Link(latency_us=300))
        assert (
            simulate(lowered, costs, slow).makespan_ms
            >= simulate(compute_only, costs, slow).makespan_ms
        )


def test_a_rendezvous_that_can_never_happen_is_a_deadlock():
    # 0B0 waits for a gradient whose forward waits for 0SEND_F0, posted only after 0B0.
    rows = ["0F0,0RECV_B0,0B0,0SEND_F0", "1RECV_F0,1F0,1B0,1SEND_B0"]
    with pytest.raises(DeadlockError, match="0B0 waits for"):
        run(rows)


def test_without_comm_overlap_a_send_holds_the_sender_until_it_arrives():
    # 0SEND_F0 holds rank 0 until 0F0's activation arrives (1.5): 0F1 runs 1.5..2.5.
    topology = Topology(2, default=Link(latency_us=500), comm_overlap=False)
    rows = ["0F0,0SEND_F0,0F1,0RECV_B0,0SEND_F1,0B0,0RECV_B1,0B1", LATE_RECV[1]]
    rank0 = [r for r in timeline(run(rows, topology)) if r[0] == 0 and "->" not in r[1]]
    assert rank0[:2] == [(0, "0F0", 0.0, 1.0), (0, "0F1", 1.5, 2.5)]


def test_blocking_sends_that_wait_for_each_other_are_a_deadlock():
    # Blocking sends: rank 0 sits in 0SEND_F1 until rank 1 posts 1RECV_F1, which rank 1
    # does only after its own 1SEND_B0, which waits for 0RECV_B0, posted after 0SEND_F1.
    topology = Topology(2, default=Link(latency_us=500), comm_overlap=False)
    with pytest.raises(DeadlockError) as info:
        run(LATE_RECV, topology)
    assert str(info.value).splitlines()[0] == (
        "deadlock: no device can make progress; rank 0 step 2: 0SEND_F1 waits for its RECV; "
        "rank 1 step 2: 1SEND_B0 waits for its RECV"
    )


def test_any_group_runs_as_one_action_and_frees_member_by_member():
    # Two backwards in one group: 2 + 2 ms, both inputs waited for, both freed at its end.
    text = "0F0,1F0,1B0,0F1,1F1,(1B1;0B0)OVERLAP_F_B,0B1\r\n"
    schedule = read_torch_csv(text)
    validate(schedule)
    costs = uniform_costs(2, 1, 2, activation_memory_bytes=100)
    trace = simulate(schedule, costs)
    assert [r[1:] for r in timeline(trace)][-2:] == [
        ("(1B1;0B0)OVERLAP_F_B", 6.0, 10.0),
        ("0B1", 10.0, 12.0),
    ]
    (memory,) = memory_timelines(trace, schedule, costs)
    assert max(memory.activation_bytes) == 300 and memory.activation_bytes[-1] == 0
    # A forward-then-backward pair keeps its own overlapped figure; other groups add up.
    assert costs.group_ms([(F, 0), (B, 1)]) == costs.overlapped_ms(0, B, 1) == 3
    pair = uniform_costs(2, 1, 2, overlapped_fb_ms=2.5)
    assert pair.group_ms([(F, 0), (B, 1)]) == 2.5 and pair.group_ms([(B, 1), (F, 0)]) == 3


# ---------------------------------------------------------------------------
# In a scenario: a schedule file as torch wrote it


def scenario_file(tmp_path, csv_name, pipeline="", extra=""):
    (tmp_path / "torch.csv").write_bytes((GOLDEN / csv_name).read_bytes())
    path = tmp_path / "s.yaml"
    path.write_text(
        "schema_version: 1\nname: torch-file\n"
        f"pipeline: {{schedule: csv, schedule_file: torch.csv, microbatches: 4{pipeline}}}\n"
        f"{extra}"
    )
    return path


def runner():
    return CliRunner()


def test_a_lowered_torch_file_runs_and_gives_the_devices(tmp_path):
    path = scenario_file(
        tmp_path,
        "torch-zbv_p2_m4_v2.lowered.csv",
        extra="costs: {forward_ms: 1, backward_ms: 2, unshard_ms: 0.5}\n",
    )
    scenario = load_scenario(path)
    assert scenario.schedule.devices == 2 and scenario.schedule.has_p2p_posts
    assert scenario.costs.unshard_ms == (0.5, 0.5, 0.5, 0.5)
    result = runner().invoke(main, ["run", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["devices"] == 2


def test_devices_stay_required_for_a_policy(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("schema_version: 1\nname: p\npipeline: {schedule: 1f1b, microbatches: 4}\n")
    with pytest.raises(ScenarioError, match="pipeline.devices: required"):
        load_scenario(path)


def test_a_broken_lowered_file_is_one_line_and_the_grid(tmp_path):
    text = raw("torch-zbv_p2_m4_v2.lowered.csv").replace("1RECV_F0,", "", 1)
    (tmp_path / "torch.csv").write_text(text)
    path = tmp_path / "s.yaml"
    path.write_text(
        "schema_version: 1\nname: b\npipeline: {schedule: csv, schedule_file: torch.csv}\n"
    )
    result = runner().invoke(main, ["run", str(path)])
    assert result.exit_code == 2
    head, *grid = result.stderr.splitlines()
    assert head.startswith("pipesim: error: ") and "missing posts: 1RECV_F0 (rank 1)" in head
    assert grid and grid[0].split()[:2] == ["Rank", "0"]


MODEL = """model: {layers: 8, hidden: 1024, heads: 16, seq_len: 1024, vocab: 32000}
parallel: {data: 4}
hardware: {gpu: h100-sxm, link: nvlink4}
"""


def test_reduce_grad_takes_the_data_parallel_all_reduce_of_its_stage(tmp_path):
    # torch's GPipe file places each stage's reduction; without those posts the same
    # all-reduce is the per-device tail after the flush.
    path = scenario_file(tmp_path, "torch-gpipe_p2_m3.csv", extra=MODEL)
    path.write_text(path.read_text().replace("microbatches: 4", "microbatches: 3"))
    scenario = load_scenario(path)
    assert scenario.tail_ms is None and scenario.costs.reduce_grad_ms is not None
    trace = run_scenario(scenario).trace
    rows = trace.frame[trace.frame.kind == "ALLREDUCE"]
    assert list(rows.stage) == [1, 0] or list(rows.stage) == [0, 1]
    durations = dict(zip(rows.stage, rows.end - rows.start, strict=True))
    assert durations == pytest.approx(dict(enumerate(scenario.costs.reduce_grad_ms)))
    # The reduction starts right after the stage's last backward on its rank.
    for stage, start in zip(rows.stage, rows.start, strict=True):
        last = trace.frame[(trace.frame.stage == stage) & (trace.frame.kind == "B")].end.max()
        assert start == last
    # Then the rank's optimizer step, joined to its last reduction.
    steps = trace.frame[trace.frame.kind == "OPTIMIZER"]
    assert dict(zip(steps.stage, steps.start, strict=True)) == dict(
        zip(rows.stage, rows.end, strict=True)
    )
    assert set(steps.name) == {"optimizer step"}
    (tmp_path / "torch.csv").write_text(
        raw("torch-gpipe_p2_m3.csv").replace(",0REDUCE_GRAD", "").replace(",1REDUCE_GRAD", "")
    )
    tail = load_scenario(path)
    # the same reduction and optimizer step, at the end of the step instead
    steps = scenario.costs.optimizer_ms
    assert tail.optimizer_ms == pytest.approx(steps) and min(steps) > 0
    assert tail.tail_ms == pytest.approx(
        [r + o for r, o in zip(scenario.costs.reduce_grad_ms, steps, strict=True)]
    )
    assert tail.costs.reduce_grad_ms is None


def test_reduce_grad_without_data_parallelism_is_the_optimizer_step_alone(tmp_path):
    path = scenario_file(
        tmp_path, "torch-gpipe_p2_m3.csv", extra=MODEL.replace("data: 4", "data: 1")
    )
    path.write_text(path.read_text().replace("microbatches: 4", "microbatches: 3"))
    frame = run_scenario(load_scenario(path)).trace.frame
    beside = frame[frame.microbatch == -1]
    assert list(beside.kind) == ["OPTIMIZER", "OPTIMIZER"]
    assert "ALLREDUCE" not in set(frame.kind) and not frame.name.str.contains("all-reduce").any()


def test_a_schedule_file_alone_gives_devices_and_microbatches(tmp_path):
    (tmp_path / "torch.csv").write_bytes((GOLDEN / "torch-dualpipev_p2_m4_v2.csv").read_bytes())
    path = tmp_path / "s.yaml"
    path.write_text(
        "schema_version: 1\nname: f\npipeline: {schedule: csv, schedule_file: torch.csv}\n"
    )
    scenario = load_scenario(path)
    assert (scenario.schedule.devices, scenario.schedule.microbatches) == (2, 4)
    assert scenario.spec.pipeline.microbatches == 4
    assert run_scenario(scenario).report.makespan_ms > 0
