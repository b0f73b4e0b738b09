"""Scenario search budgets of the eviction actions, counted in scenarios instead of KAI's wall-clock time.

KAI (``actions/common/solvers/search_budget.go``, defaults in ``pkg/common/constants``) bounds each search by
time: per action 5 min, per job 4 min (``min(job limit, what the action has left)``), per generator 2 min
(``NodeLocalGreedy`` 30 s, ``MultiNodeGang`` 2 min, each ``min(limit, what the job has left)``). A generator
out of budget ends quietly and the next generator is tried; a job out of budget ends the whole action (KAI's
``SearchResultDeadlineExhausted`` stops reclaim, preempt and consolidation alike).

kaidash counts simulated scenarios instead, so decisions do not depend on machine speed or load: every
scenario a generator emits and the solver simulates (or rules out by arithmetic, :mod:`.packing`) spends one
unit of the generator's, the job's and the action's budget; a scenario skipped as already tried spends
nothing. The limits keep KAI's proportions between generators and leave the job budget above their sum, so
that, as in KAI with its defaults, only a nearly spent action budget makes a job's budget bind.
"""

from __future__ import annotations

from dataclasses import dataclass

NODE_LOCAL_GREEDY = "NodeLocalGreedy"
MULTI_NODE_GANG = "MultiNodeGang"
GENERATORS = (NODE_LOCAL_GREEDY, MULTI_NODE_GANG)
"""KAI's scenario generators in registration order (plugins ``sg-nodelocalgreedy``, ``sg-multinodegang``)."""

GENERATOR_LIMITS = {NODE_LOCAL_GREEDY: 256, MULTI_NODE_GANG: 1024}
"""Scenarios per generator and job (KAI: 30 s and 2 min)."""

JOB_LIMIT = 2048
"""Scenarios per job, over all its generators and probes (KAI: 4 min)."""

ACTION_LIMIT = 50_000
"""Scenarios per action run (KAI: 5 min)."""


@dataclass
class Budget:
    """A count of scenarios left, and the budget it also spends from (job → action)."""

    limit: int
    used: int = 0
    parent: "Budget | None" = None

    @property
    def left(self) -> int:
        """``min(limit − used)`` over this budget and its parents."""
        own = self.limit - self.used
        b = self.parent
        while b is not None:
            other = b.limit - b.used
            if other < own:
                own = other
            b = b.parent
        return own

    def exhausted(self) -> bool:
        """``left <= 0``: some budget up the chain is spent."""
        b: "Budget | None" = self
        while b is not None:
            if b.limit - b.used <= 0:
                return True
            b = b.parent
        return False

    def spend(self) -> None:
        b: "Budget | None" = self
        while b is not None:
            b.used += 1
            b = b.parent


class ActionBudget(Budget):
    """The budget of one action run; :meth:`begin_job` opens a job's share of it."""

    def __init__(self, limit: int = ACTION_LIMIT, job_limit: int = JOB_LIMIT,
                 generator_limits: dict[str, int] | None = None):
        super().__init__(limit)
        self.job_limit = job_limit
        self.generator_limits = dict(GENERATOR_LIMITS if generator_limits is None else generator_limits)

    def begin_job(self) -> "JobBudget":
        """KAI ``BeginJob``: ``min(job limit, action left)``; *reduced* when the action had less left."""
        return JobBudget(limit=self.job_limit, parent=self, reduced=self.left < self.job_limit,
                         generator_limits=self.generator_limits)


@dataclass
class JobBudget(Budget):
    reduced: bool = False
    generator_limits: dict | None = None

    def begin_generator(self, name: str) -> Budget:
        """KAI ``BeginGenerator``: ``min(generator limit, job left)``."""
        return Budget(limit=(self.generator_limits or {}).get(name, self.limit), parent=self)


__all__ = ["ActionBudget", "JobBudget", "Budget", "GENERATORS", "NODE_LOCAL_GREEDY", "MULTI_NODE_GANG",
           "GENERATOR_LIMITS", "JOB_LIMIT", "ACTION_LIMIT"]
