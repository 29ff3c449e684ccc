"""Plan about a million candidates on a Dask cluster and say how long it took.

    python benchmarks/bench_plan_dask.py [--workers 2] [--scheduler tcp://HOST:PORT] [--local]

Plans ``scenarios/plan-llama-405b-8192xh100.yaml`` on 8,192 GPUs over a widened space
(``SPACE``: microbatch sizes 1 to 19, virtual stages 1 and 2, sequence parallelism off and
on, every other axis at its default), as ``pipesim plan --executor dask`` does, on the
cluster at ``--scheduler`` or on a ``distributed.LocalCluster`` of ``--workers`` worker
processes started here. ``--local`` plans it again on local processes (``--workers`` of
them) and says whether the two outputs are the same. Prints the space size, the
candidates folded, pruned, bounded out and simulated, and the wall time of each run.
"""

from __future__ import annotations

import argparse
import time
from contextlib import nullcontext
from pathlib import Path

from pipesim import plan, read_mapping
from pipesim.analysis.plan.fold import FOLDED
from pipesim.cli.gc_pause import no_cyclic_gc

SCENARIO = str(Path(__file__).parent.parent / "scenarios" / "plan-llama-405b-8192xh100.yaml")
GPUS = 8192
SPACE = (
    f"pipeline.microbatch_size={','.join(map(str, range(1, 20)))}",
    "pipeline.virtual_stages=1,2",
    "parallel.sequence_parallel=false,true",
)


def timed(**settings):
    start = time.perf_counter()
    with no_cyclic_gc():
        result = plan(read_mapping(SCENARIO), SCENARIO, GPUS, SPACE, **settings)
    return result, time.perf_counter() - start


def summary(name: str, result, wall: float) -> str:
    folded = sum(n for reason, n in result.pruned.items() if reason.endswith(FOLDED))
    return (
        f"{name}: space {result.space_size:,}, folded {folded:,}, pruned "
        f"{sum(result.pruned.values()) - folded:,}, bounded out {result.bounded:,}, "
        f"simulated {result.scored:,}, {wall:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scheduler")
    parser.add_argument("--local", action="store_true")
    args = parser.parse_args()
    from distributed import LocalCluster  # the [dask] extra: only this benchmark needs it

    cluster = (
        nullcontext(None)
        if args.scheduler
        else LocalCluster(
            n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
    )
    with cluster as started:
        scheduler = args.scheduler or started.scheduler_address
        remote, wall = timed(executor="dask", scheduler=scheduler)
    print(summary(f"dask ({scheduler})", remote, wall), flush=True)
    if args.local:
        local, local_wall = timed(jobs=args.workers)
        print(summary(f"local ({args.workers} processes)", local, local_wall))
        same = [r.to_dict() for r in remote.results] == [r.to_dict() for r in local.results]
        front = [r.to_dict() for r in remote.pareto] == [r.to_dict() for r in local.pareto]
        print(f"same results: {same}, same Pareto front: {front}")


if __name__ == "__main__":
    main()
