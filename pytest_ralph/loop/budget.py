"""What bounds a run besides the checks: the iteration limit, the wall-clock budget
(``--ralph-budget``) and the cost limit (``--ralph-max-cost``), and the timeouts they cut.

:class:`Budget` is the one place these limits are compared with what was spent; the engine
(:class:`pytest_ralph.loop.engine.RunEngine`) asks it and turns a reason into a stop (exit 1).

This module does not import pytest.
"""

from __future__ import annotations

import time
from dataclasses import replace

from ..agents.run import AgentRun
from ..checks.phase import CheckPhaseConfig
from ..util.text import plural
from .records import RunRecord
from .settings import Settings


class Budget:
    """The limits of one run, counted from :meth:`start`.

    Args:
        settings: the effective settings (``max_iterations``, ``budget`` in seconds,
            ``max_cost`` in US dollars, ``agent_timeout`` in seconds).
        check_cap: the longest a check phase may take, in seconds, whatever is left of the
            budget (the Stop hook's timeout, say); ``None`` for no cap.
    """

    def __init__(self, settings: Settings, *, check_cap: float | None = None) -> None:
        self.settings = settings
        self.check_cap = check_cap
        self._t0 = time.monotonic()
        self._cost_warned = False

    def start(self) -> None:
        """Start the wall-clock budget now."""
        self._t0 = time.monotonic()

    def count_back(self, seconds: float) -> None:
        """Count the budget as if it had started ``seconds`` earlier."""
        self._t0 -= seconds

    def allows(self, n: int) -> bool:
        """Whether iteration ``n`` is within the iteration limit."""
        return n <= self.settings.max_iterations

    def remaining(self) -> float | None:
        """Seconds left of ``--ralph-budget``, or ``None`` without a budget."""
        if self.settings.budget is None:
            return None
        return self.settings.budget - (time.monotonic() - self._t0)

    def bounded(self, phase: CheckPhaseConfig) -> CheckPhaseConfig:
        """``phase`` with its timeout cut to what is left of ``--ralph-budget`` (at least 1 s,
        so that a spent budget still ends the phase cleanly), and to :attr:`check_cap`."""
        left = self.remaining()
        if left is not None:
            phase = replace(phase, timeout=max(min(phase.timeout, left), 1.0))
        if self.check_cap is not None:
            phase = replace(phase, timeout=min(phase.timeout, self.check_cap))
        return phase

    def agent_timeout(self) -> float:
        """The agent's timeout: ``--ralph-agent-timeout``, cut to what is left of the budget."""
        left = self.remaining()
        timeout = self.settings.agent_timeout
        return timeout if left is None else max(min(timeout, left), 0.001)

    def uncounted(self, agent_run: AgentRun) -> bool:
        """``True`` the first time an agent run that ran reports no cost while
        ``--ralph-max-cost`` is set (the cost limit cannot stop the run then)."""
        s = self.settings
        if (s.max_cost is not None and agent_run.cost_usd is None and agent_run.ran
                and not self._cost_warned):
            self._cost_warned = True
            return True
        return False

    def limit_reason(self, run: RunRecord) -> str:
        """Why the run stops at the iteration limit (exit 1), one sentence."""
        last = run.last.results
        failing = plural(len(last.failing), "criterion", "criteria")
        held = sorted(run.blocked)
        blocked_note = (f"; {plural(len(held), 'story', 'stories')} blocked "
                        f"({', '.join(held[:8])}{', ...' if len(held) > 8 else ''}), see the "
                        "report" if held else "")
        return (f"stopped at the iteration limit ({self.settings.max_iterations}) "
                f"with {failing} still failing"
                + (" and check-phase errors" if last.errors else "")
                + blocked_note)

    def spent_reason(self, run: RunRecord) -> str:
        """Why the run stops (exit 1) when the wall-clock budget or the cost limit is spent;
        ``""`` when neither is."""
        s = self.settings
        last = run.last.results
        failing = plural(len(last.failing), "criterion", "criteria")
        left = self.remaining()
        if left is not None and left <= 0:
            return (f"stopped at the wall-clock budget ({s.budget:g} s, "
                    f"--ralph-budget) with {failing} still failing")
        if s.max_cost is not None and run.cost >= s.max_cost:
            return (f"stopped at the cost limit: the agent runs cost "
                    f"${run.cost:.4f} (--ralph-max-cost {s.max_cost:g}) with "
                    f"{failing} still failing")
        return ""

    def pause_reason(self, wait: float, source: str) -> str:
        """Why the run stops (exit 1) rather than pause ``wait`` seconds for a rate limit
        (``source``: where that figure came from): the pause outlasts the budget; ``""``
        when it fits."""
        left = self.remaining()
        if left is None or wait < left:
            return ""
        return (f"stopped at the wall-clock budget: the agent is rate limited "
                f"for {wait:.0f} s ({source}), more than the {max(left or 0, 0):.0f}"
                f" s left of --ralph-budget {self.settings.budget:g}")
