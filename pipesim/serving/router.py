"""The router: which replica a request goes to.

* ``round_robin``: replicas in turn, whatever their load;
* ``least_outstanding``: the replica with the fewest requests assigned and not yet
  finished (lowest index on a tie), the usual "least requests" of load balancers.

Inside a replica the request then goes to the virtual engine with the fewest unfinished
requests, as vLLM does.
"""

from __future__ import annotations

ROUTERS = ("round_robin", "least_outstanding")


class Router:
    """Picks replicas and keeps count of each one's outstanding requests."""

    __slots__ = ("policy", "outstanding", "_turn")

    def __init__(self, policy: str, replicas: int) -> None:
        if policy not in ROUTERS:
            raise ValueError(f"router: must be one of {', '.join(ROUTERS)}, got {policy!r}")
        self.policy = policy
        self.outstanding = [0] * replicas
        self._turn = 0

    def assign(self) -> int:
        """The replica for the next request (counted as outstanding there)."""
        count = self.outstanding
        if self.policy == "round_robin":
            replica = self._turn
            self._turn = (replica + 1) % len(count)
        else:
            replica = min(range(len(count)), key=count.__getitem__)
        count[replica] += 1
        return replica

    def finished(self, replica: int) -> None:
        self.outstanding[replica] -= 1
