"""The planner against brute force: every candidate built as ``pipesim run`` builds it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.analysis.plan import (
    Candidate,
    Plan,
    PlanError,
    PlanMismatch,
    PlanRow,
    Scorer,
    build_space,
    confirm_top,
    describe,
    distinct,
    emit_mapping,
    enumerate_space,
    explain_plan,
    pareto,
    plan,
    rank,
    run_emitted,
)
from pipesim.cluster.transformer import TransformerModel, stage_parameters
from pipesim.plot.pareto import pareto_figure
from pipesim.scenario.build import parse_spec
from pipesim.scenario.schema import ScenarioError
from pipesim.schedules.ir import ScheduleError

SOURCE = "small.yaml"
CAPACITY_BYTES = 40 * 2**30  # the A100 40GB
USABLE_BYTES = CAPACITY_BYTES * (1 - 0.05)  # less the default 5% headroom


def small_base() -> dict:
    """A 4.7B-parameter gated-MLP, grouped-query model (16 of Llama-2-13B's layers) on 8
    A100 40GB in nodes of 4: big enough that many layouts do not fit, small enough to
    simulate quickly."""
    return {
        "schema_version": 1,
        "name": "small",
        "pipeline": {"schedule": "1f1b", "devices": 2},
        "model": {
            "layers": 16,
            "hidden": 5120,
            "heads": 40,
            "kv_heads": 8,
            "mlp": "gated",
            "ffn_hidden": 13824,
            "seq_len": 4096,
            "vocab": 32000,
            "global_batch": 32,
            "flash_attention": True,
        },
        "parallel": {"tensor": 1},
        "hardware": {
            "gpu": "a100-sxm-40gb",
            "gpus_per_node": 4,
            "intra_node_link": "nvlink4",
            "inter_node_link": "ib-ndr",
        },
    }


SMALL_SPACE = (
    "pipeline.schedule=1f1b,interleaved-1f1b,zb-h1,zbv,dualpipe",
    "pipeline.virtual_stages=1,2",
    "pipeline.microbatch_size=1,4",
    "model.recompute=false,true",
    "parallel.zero_stage=0,1",
    "parallel.dp_overlap=false",
    "parallel.tp_overlap=false",
)


def brute_force(
    base: dict, space: tuple[str, ...], gpus: int
) -> list[tuple[int, Candidate, object]]:
    """Every candidate of the space built from its emitted scenario and run on the SimPy
    engine: ``(index, candidate, Report or None when it cannot be built)``."""
    found = []
    points = enumerate_space(build_space(parse_spec(base, SOURCE), SOURCE, gpus, space))
    for index, (candidate, _) in enumerate(points):
        if candidate is None:
            continue
        try:
            mapping = emit_mapping(base, candidate)
            report = run_emitted(mapping, SOURCE, evaluator="simpy").report
        except (ScenarioError, ScheduleError):
            report = None
        found.append((index, candidate, report))
    return found


@pytest.mark.slow
def test_the_planner_agrees_with_brute_force_on_the_simpy_engine():
    base = small_base()
    result = plan(base, SOURCE, 8, SMALL_SPACE, top=10_000, confirm=3)
    assert 200 <= result.space_size <= 1000
    truth = brute_force(base, SMALL_SPACE, 8)
    fitting = [(i, c, r) for i, c, r in truth if r is not None and not r.oom]
    # every scored candidate equals its own engine run; every other one cannot run or fit,
    # or is another one's step under another name (folded before scoring)
    folded = sum(n for reason, n in result.pruned.items() if "folded before scoring" in reason)
    assert result.scored + folded == len(fitting) > 50 and folded > 0
    memory = sum(
        n
        for reason, n in result.pruned.items()
        if "38.0 GiB usable (40 GiB less 5% headroom) on some device" in reason
    )
    too_big = [r for _, _, r in truth if r is not None and r.oom]
    assert memory == len(too_big) > 50  # pruned for memory exactly where the engine says OOM
    by_candidate = {c: r for _, c, r in fitting}
    for row in result.results:
        report = by_candidate[row.candidate]
        assert row.step_time_ms == pytest.approx(report.step_time_ms, rel=1e-9)
        assert row.peak_memory_bytes == pytest.approx(
            max(d.peak_memory_bytes for d in report.per_device), rel=1e-9
        )
        assert row.peak_memory_bytes <= USABLE_BYTES
    # the winner of brute force, with the same tie rule (less memory, then space order)
    best = min(
        fitting,
        key=lambda t: (t[2].step_time_ms, max(d.peak_memory_bytes for d in t[2].per_device), t[0]),
    )
    assert result.results[0].candidate == best[1]
    assert result.space_size == sum(result.pruned.values()) + result.scored


def test_counts_add_up_and_memory_pruning_is_counted():
    base = small_base()
    space = ("pipeline.schedule=1f1b,zbv", "parallel.tensor=1,2", "pipeline.microbatch_size=1,4")
    result = plan(base, SOURCE, 8, space, top=1000, confirm=2)
    assert result.space_size == sum(result.pruned.values()) + result.scored
    memory = [
        n
        for reason, n in result.pruned.items()
        if "38.0 GiB usable (40 GiB less 5% headroom) on some device" in reason
    ]
    assert memory and memory[0] > 0
    assert result.confirmed == 2
    assert all(row.peak_memory_bytes <= USABLE_BYTES for row in result.results)
    assert [r.step_time_ms for r in result.results] == sorted(
        r.step_time_ms for r in result.results
    )


def test_emitted_scenario_reproduces_the_step_time_exactly():
    base = small_base()
    result = plan(base, SOURCE, 8, ("pipeline.schedule=zbv,1f1b",), top=3, confirm=0)
    for evaluator in ("auto", "simpy"):
        engine = run_emitted(result.winner_mapping(0), SOURCE, evaluator)
        assert engine.report.step_time_ms == pytest.approx(
            result.results[0].step_time_ms, rel=1e-9, abs=0
        )
    assert run_emitted(result.winner_mapping(0), SOURCE).report.step_time_ms == (
        result.results[0].step_time_ms
    )  # pipesim run's default: the same evaluator, the same number to the last bit
    assert result.results[0].evaluator in ("fast", "simpy")


def test_a_disagreement_with_the_engine_is_raised():
    base = small_base()
    result = plan(base, SOURCE, 8, ("pipeline.schedule=1f1b",), top=2, confirm=0)
    first = result.results[0]
    wrong = [replace(first, step_time_ms=first.step_time_ms * (1 + 1e-6)), *result.results[1:]]
    with pytest.raises(PlanMismatch, match="rank 1: step_time_ms"):
        confirm_top(result, 1, wrong)


def test_same_plan_with_one_and_two_jobs():
    base = small_base()
    space = ("pipeline.schedule=1f1b,zb-h1,interleaved-1f1b", "model.recompute=false")
    one = plan(base, SOURCE, 8, space, jobs=1, confirm=0, top=50).to_dict()
    two = plan(base, SOURCE, 8, space, jobs=2, confirm=0, top=50).to_dict()
    one.pop("wall_s"), two.pop("wall_s")
    assert one == two


CANDIDATE = Candidate(
    tensor=1,
    devices=1,
    data=1,
    schedule="1f1b",
    virtual_stages=1,
    microbatch_size=1,
    microbatches=4,
    recompute=False,
    zero_stage=0,
    partition="even",
    sequence_parallel=False,
    dp_overlap=False,
    tp_overlap=False,
)


def plan_row(step: float, memory: float, bubble: float = 0.1, name: int = 4) -> PlanRow:
    """A row of ``CANDIDATE`` (``name``: its microbatch count, which tells rows apart)."""
    return PlanRow(
        replace(CANDIDATE, microbatches=name),
        step_time_ms=step,
        tokens_per_second=None,
        mfu=None,
        peak_memory_bytes=memory,
        bubble_fraction=bubble,
        evaluator="fast",
        peak_memory_bytes_per_device=(memory,),
    )


def test_pareto_front_is_the_non_dominated_rows():
    rows = [
        (0, plan_row(1.0, 9.0)),
        (1, plan_row(2.0, 5.0)),
        (2, plan_row(2.0, 7.0)),
        (3, plan_row(3.0, 5.0)),
        (4, plan_row(4.0, 1.0)),
    ]
    ranked = rank(rows)
    assert [r.peak_memory_bytes for r in ranked] == [9.0, 5.0, 7.0, 5.0, 1.0]
    assert [(r.step_time_ms, r.peak_memory_bytes) for r in pareto(ranked)] == [
        (1.0, 9.0),
        (2.0, 5.0),
        (4.0, 1.0),
    ]


@pytest.mark.parametrize(
    ("items", "gpus", "message"),
    [
        (("pipeline.layers=2",), 8, "--space pipeline.layers: not an axis"),
        (("parallel.tensor=0",), 8, "--space parallel.tensor: '0' is not allowed"),
        (("pipeline.schedule=nope",), 8, "--space pipeline.schedule: 'nope' is not allowed"),
        (("model.recompute=maybe",), 8, "allowed: true, false"),
        (("parallel.zero_stage=4",), 8, "allowed: 0, 1, 2, 3"),
        (("parallel.tensor",), 8, "expected key.path=v1,v2"),
        ((), 0, "--gpus 0"),
    ],
)
def test_bad_space_is_one_plan_error(items, gpus, message):
    with pytest.raises(PlanError, match=message.replace("(", r"\(").replace(".", r"\.")):
        build_space(parse_spec(small_base(), SOURCE), SOURCE, gpus, items)


def test_plan_needs_a_model_and_a_global_batch():
    base = small_base()
    del base["model"]["global_batch"]
    base["pipeline"]["microbatches"] = 4
    with pytest.raises(PlanError, match="model.global_batch: required"):
        plan(base, SOURCE, 8)


def test_plan_is_a_frozen_record():
    assert Plan.__dataclass_params__.frozen


DASK_SPACE = ("pipeline.schedule=1f1b,zbv", "model.recompute=false", "parallel.zero_stage=1")


def test_dask_local_cluster_gives_the_same_plan():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        remote = plan(
            small_base(),
            SOURCE,
            8,
            DASK_SPACE,
            executor="dask",
            confirm=0,
            scheduler=cluster.scheduler_address,
        ).to_dict()
    local = plan(small_base(), SOURCE, 8, DASK_SPACE, confirm=0).to_dict()
    remote.pop("wall_s"), local.pop("wall_s")
    assert remote == local


def test_progress_counts_every_candidate_and_the_size_comes_first():
    seen, sizes = [], []
    result = plan(
        small_base(),
        SOURCE,
        8,
        DASK_SPACE,
        confirm=0,
        progress=lambda n: seen.append((len(sizes), n)),
        on_size=sizes.append,
    )
    assert sizes == [result.space_size]
    assert all(before == 1 for before, _ in seen)  # every update after the size was given
    assert sum(n for _, n in seen) == result.space_size


def test_explain_terms_add_up_to_the_step_and_name_memory_forced_choices():
    result = plan(small_base(), SOURCE, 8, SMALL_SPACE, top=50, confirm=0)
    explanation = explain_plan(small_base(), SOURCE, result.results)
    winner, runner_up = explanation.winner, explanation.runner_up
    for part in (winner, runner_up):  # busy + idle by cause = the step, on every device
        assert sum(part.terms_ms.values()) == pytest.approx(part.step_time_ms, rel=1e-12)
    assert winner.step_time_ms == result.results[0].step_time_ms
    assert runner_up.step_time_ms > winner.step_time_ms
    for part, row in ((winner, result.results[0]),):
        tensor_ms = part.terms_ms["tensor-parallel communication"]
        assert (tensor_ms > 0) == (row.candidate.tensor > 1)
    # ZeRO-1 is what lets the winner fit in 40 GiB: at stage 0 its walk exceeds the GPU
    assert result.results[0].candidate.zero_stage == 1
    assert any(s.startswith("ZeRO stage 1 is forced by memory") for s in winner.forced)
    lines = explanation.sentences()
    assert lines[0].startswith("#1 ") and lines[1].startswith("#2 ")
    assert f"{runner_up.step_time_ms - winner.step_time_ms:.3f} ms faster" in lines[2]


@pytest.mark.slow
def test_searched_policies_on_request_match_their_emitted_scenarios():
    space = (
        "pipeline.schedule=zb-auto,v-auto",
        "parallel.tensor=2",
        "pipeline.devices=2",
        "model.recompute=false",
        "parallel.zero_stage=1",
        "model.partition=even",
    )
    result = plan(small_base(), SOURCE, 8, space, top=20, confirm=0)
    assert {row.candidate.schedule for row in result.results} == {"zb-auto", "v-auto"}
    for rank_index, row in enumerate(result.results):
        engine = run_emitted(result.winner_mapping(rank_index), SOURCE, "simpy").report
        assert row.step_time_ms == pytest.approx(engine.step_time_ms, rel=1e-9)


def test_keys_that_reach_only_the_tail_never_share_costs_wrongly():
    """dp_overlap and the ZeRO stage change the end-of-step tail (and ZeRO-3 each pass's
    gathers), tp_overlap each pass: every candidate still gets its own costs, confirmed
    here on all of them."""
    space = (
        "pipeline.schedule=zbv,1f1b",
        "parallel.dp_overlap=false,true",
        "parallel.zero_stage=0,1,2,3",
        "model.recompute=false",
        "parallel.tensor=2",
        "model.partition=even",
        "parallel.tp_overlap=true",
    )
    result = plan(small_base(), SOURCE, 8, space, top=1000, confirm=1000)
    assert result.confirmed == result.scored > 20


def test_under_a_pipeline_zero2_saves_nothing_and_zero3_only_the_weights():
    """Two pipeline stages over 4 replicas: the gradients wait whole for the step's one
    reduce-scatter, so ZeRO-2 is ZeRO-1 in time and memory, and ZeRO-3 saves each device
    3/4 of its stage's bf16 weights, 1.5 bytes a parameter, never the gradients' share."""
    space = (
        "pipeline.schedule=1f1b",
        "pipeline.devices=2",
        "parallel.tensor=1",
        "pipeline.microbatch_size=1",
        "parallel.zero_stage=1,2,3",
        "model.recompute=true",
        "model.partition=even",
        "parallel.dp_overlap=false",
        "parallel.tp_overlap=false",
    )
    result = plan(small_base(), SOURCE, 8, space, top=10, confirm=0)
    rows = {row.candidate.zero_stage: row for row in result.results}
    assert sorted(rows) == [1, 3]  # ZeRO-2 is ZeRO-1's step: folded before scoring
    reason = "same step as an earlier candidate but for parallel.zero_stage (folded before scoring)"
    assert result.pruned[reason] == 1
    zero2 = Scorer(small_base(), SOURCE).score(replace(rows[1].candidate, zero_stage=2)).row
    for key in ("step_time_ms", "peak_memory_bytes_per_device"):
        assert getattr(zero2, key) == getattr(rows[1], key)
    spec = parse_spec(small_base(), SOURCE).model
    model = TransformerModel(
        layers=spec.layers,
        hidden=spec.hidden,
        heads=spec.heads,
        kv_heads=spec.kv_heads,
        mlp=spec.mlp,
        ffn_hidden=spec.ffn_hidden,
        seq_len=spec.seq_len,
        vocab=spec.vocab,
    )
    saved = [
        one - three
        for one, three in zip(
            rows[1].peak_memory_bytes_per_device,
            rows[3].peak_memory_bytes_per_device,
            strict=True,
        )
    ]
    # the allocator's 3% of what is allocated goes with it
    expected = [1.5 * params * 1.03 for params in stage_parameters(model, (8, 8))]
    assert saved == pytest.approx(expected, rel=1e-12)


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(
    gpus=st.sampled_from([2, 4, 6, 8]),
    layers=st.integers(4, 12),
    global_batch=st.sampled_from([8, 12, 16, 24]),
    schedules=st.sets(
        st.sampled_from(
            ["1f1b", "gpipe", "zb-h2", "interleaved-1f1b", "zbv", "dualpipev", "chimera"]
        ),
        min_size=1,
    ),
    overlap=st.booleans(),
)
def test_every_scored_candidate_is_its_own_engine_run(
    gpus, layers, global_batch, schedules, overlap
):
    """Whatever the job: the counts add up, nothing reported fits badly, and every scored
    candidate, confirmed from its emitted scenario on the SimPy engine, agrees."""
    base = small_base()
    base["model"].update(layers=layers, global_batch=global_batch)
    space = (
        f"pipeline.schedule={','.join(sorted(schedules))}",
        "pipeline.microbatch_size=1,2",
        f"parallel.dp_overlap={str(overlap).lower()}",
        "parallel.zero_stage=0,3",
    )
    result = plan(base, SOURCE, gpus, space, top=10_000, confirm=10_000)
    assert result.space_size == sum(result.pruned.values()) + result.scored
    assert result.confirmed == result.scored == len(result.results)
    assert all(row.peak_memory_bytes <= USABLE_BYTES for row in result.results)


def test_pareto_figure_draws_the_front_in_gib_and_marks_the_winner():
    space = ("pipeline.schedule=1f1b,zbv", "parallel.dp_overlap=false", "parallel.tp_overlap=true")
    result = plan(small_base(), SOURCE, 8, space, top=5, confirm=0)
    figure = pareto_figure(result, capacity_bytes=CAPACITY_BYTES)
    ax = figure.axes[0]
    front = sorted(result.pareto, key=lambda row: row.peak_memory_bytes)
    lines = {line.get_label(): line for line in ax.get_lines()}
    xs, ys = lines["Pareto front"].get_data()
    assert list(xs) == [row.peak_memory_bytes / 2**30 for row in front]
    assert list(ys) == [row.step_time_ms for row in front]
    star_x, star_y = lines["winner"].get_data()
    assert (star_x[0], star_y[0]) == (
        result.results[0].peak_memory_bytes / 2**30,
        result.results[0].step_time_ms,
    )
    assert "GPU memory (40 GiB)" in lines
    assert result.usable_bytes == USABLE_BYTES  # what every row was pruned against
    usable = [line for label, line in lines.items() if label.startswith("usable (")]
    assert [line.get_xdata()[0] for line in usable] == [USABLE_BYTES / 2**30]
    assert len(ax.collections[0].get_offsets()) == result.scored
    assert result.capacity_bytes == CAPACITY_BYTES  # the line's default: the plan's GPU
    default = pareto_figure(result).axes[0]
    assert [
        line.get_xdata()[0]
        for line in default.get_lines()
        if line.get_label() == "GPU memory (40 GiB)"
    ] == [40.0]


def test_distinct_folds_equal_outcomes_into_the_fastest_and_counts_them():
    def row(index, step, memory, bubble=0.1):
        return (index, plan_row(step, memory, bubble, name=index))

    rows = [
        row(0, 10.0, 5 * 2**30),
        row(1, 10.0 + 1e-9, 5 * 2**30 + 100),
        row(2, 10.0, 6 * 2**30),
        row(3, 9.0, 7 * 2**30),
        row(4, 10.0, 5 * 2**30, bubble=0.2),
    ]
    folded = distinct(rank(rows))
    assert [(r.candidate.microbatches, r.equivalent) for r in folded] == [
        (3, 0),
        (0, 1),
        (4, 0),
        (2, 0),
    ]
    assert "(+1 alike)" in describe(folded[1])
