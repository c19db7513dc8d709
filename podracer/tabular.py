"""Tabular reinforcement learning: small MDPs as tables, and the TD(0), SARSA and Q-learning updates.

The course's lesson 01 (``notebooks/01_tabular.ipynb``) runs on this module, so the notebook holds
the ideas and not the bookkeeping. It follows Sutton & Barto (2018), chapter 6: the random walk of
Example 6.2 for prediction, the cliff walk of Example 6.6 for control.

Everything is batched over independent *runs*, the way the library's envs are batched over
environments: a value table is ``(N, S)`` and an action-value table ``(N, S, A)``, one row per run,
and one step moves every run by one transition. A learning curve averaged over 100 runs costs about
what one run does, and the updates index each run's own row, so no two writes collide.

The updates, for one transition :math:`(s, a, r, s')` with step size :math:`\\alpha`:

- TD(0), the value of the policy that chose the actions:
  :math:`V(s) \\leftarrow V(s) + \\alpha\\,[r + \\gamma (1 - \\text{terminated})\\, V(s') - V(s)]`;
- SARSA (on-policy), with the next action :math:`a'` the policy takes:
  :math:`Q(s, a) \\leftarrow Q(s, a) + \\alpha\\,[r + \\gamma (1 - \\text{terminated})\\, Q(s', a') - Q(s, a)]`;
- Q-learning (off-policy), with the greedy next action whatever the policy does:
  :math:`Q(s, a) \\leftarrow Q(s, a) + \\alpha\\,[r + \\gamma (1 - \\text{terminated}) \\max_{a'} Q(s', a') - Q(s, a)]`.

A terminated transition drops the bootstrap: the value of a terminal state is 0 by definition.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["ControlRun", "TabularMDP", "cliff_walk", "epsilon_greedy", "greedy_path", "learn_q", "learn_values",
           "policy_evaluation", "q_learning_update", "random_walk", "sarsa_update", "step", "td0_update",
           "value_iteration"]

# Grid actions, as (row, column) moves; a gridworld's action a moves by MOVES[a].
MOVES = ((-1, 0), (0, 1), (1, 0), (0, -1))
ACTION_NAMES = ("up", "right", "down", "left")


@dataclass(frozen=True)
class TabularMDP:
    """A finite MDP as tables: ``transitions[s, a, s']`` = :math:`P(s' \\mid s, a)`, ``rewards[s, a, s']``
    the reward of that transition, episodes begin in ``start`` and end on entering a ``terminal``
    state. ``shape`` is a gridworld's (rows, columns), state ``s`` at row ``s // columns``."""

    transitions: torch.Tensor  # (S, A, S), rows sum to 1
    rewards: torch.Tensor  # (S, A, S)
    start: int
    terminal: torch.Tensor  # (S,) bool
    shape: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        S, A, S2 = self.transitions.shape
        if S != S2 or self.rewards.shape != (S, A, S) or self.terminal.shape != (S,):
            shapes = [tuple(x.shape) for x in (self.transitions, self.rewards, self.terminal)]
            raise ValueError(f"TabularMDP: transitions and rewards must be (S, A, S) and terminal (S,), got {shapes}")
        if not torch.allclose(self.transitions.sum(-1), torch.ones(S, A, dtype=self.transitions.dtype)):
            raise ValueError("TabularMDP: each transitions[s, a] must sum to 1 (a distribution over next states)")
        if not 0 <= self.start < S or bool(self.terminal[self.start]):
            raise ValueError(f"TabularMDP: start must be a non-terminal state in [0, {S}), got {self.start}")

    @property
    def num_states(self) -> int:
        return self.transitions.shape[0]

    @property
    def num_actions(self) -> int:
        return self.transitions.shape[1]


def random_walk(n: int = 5) -> TabularMDP:
    """Sutton & Barto's Example 6.2: states 0 and ``n + 1`` terminal, ``n`` states between, start in
    the middle; one action, which moves left or right with probability 1/2 each; +1 for leaving on
    the right, 0 otherwise. With :math:`\\gamma = 1` the true values are :math:`V(s) = s / (n + 1)`."""
    if n < 1 or n % 2 == 0:
        raise ValueError(f"random_walk(n): n must be odd and positive (the start is the middle state), got {n}")
    S = n + 2
    P, R = torch.zeros(S, 1, S), torch.zeros(S, 1, S)
    for s in range(1, n + 1):
        P[s, 0, s - 1] = P[s, 0, s + 1] = 0.5
    R[n, 0, n + 1] = 1.0
    for s in (0, n + 1):  # terminal states absorb (never stepped from: episodes end on entering them)
        P[s, 0, s] = 1.0
    terminal = torch.zeros(S, dtype=torch.bool)
    terminal[[0, n + 1]] = True
    return TabularMDP(P, R, start=(n + 1) // 2, terminal=terminal)


def cliff_walk(rows: int = 4, columns: int = 12) -> TabularMDP:
    """Sutton & Barto's Example 6.6: a ``rows`` x ``columns`` grid, start at the bottom left, goal
    (terminal) at the bottom right, the cliff between them along the bottom row. Actions up, right,
    down, left (``ACTION_NAMES``); a move off the grid stays put. Every step costs 1; stepping into
    the cliff costs 100 and sends the agent back to the start (the episode goes on)."""
    if rows < 2 or columns < 3:
        raise ValueError(f"cliff_walk needs at least 2 rows and 3 columns (start, cliff, goal), got {rows}x{columns}")
    S, A = rows * columns, len(MOVES)
    start, goal = (rows - 1) * columns, rows * columns - 1
    cliff = set(range(start + 1, goal))
    P, R = torch.zeros(S, A, S), torch.zeros(S, A, S)
    for s in range(S):
        for a, (dr, dc) in enumerate(MOVES):
            if s == goal or s in cliff:  # never stepped from: terminal, or never entered (the cliff sends back)
                P[s, a, s] = 1.0
                continue
            r = min(max(s // columns + dr, 0), rows - 1)
            c = min(max(s % columns + dc, 0), columns - 1)
            nxt = r * columns + c
            if nxt in cliff:
                P[s, a, start], R[s, a, start] = 1.0, -100.0
            else:
                P[s, a, nxt], R[s, a, nxt] = 1.0, -1.0
    terminal = torch.zeros(S, dtype=torch.bool)
    terminal[goal] = True
    return TabularMDP(P, R, start=start, terminal=terminal, shape=(rows, columns))


def _expected_rewards(mdp: TabularMDP) -> torch.Tensor:
    return (mdp.transitions * mdp.rewards).sum(-1)  # (S, A): E[r | s, a]


def value_iteration(mdp: TabularMDP, gamma: float = 1.0, tol: float = 1e-8, max_iterations: int = 100_000
                    ) -> torch.Tensor:
    """:math:`Q^*` (``(S, A)``, float64) by value iteration,
    :math:`Q(s, a) \\leftarrow E[r + \\gamma (1 - \\text{terminal}(s')) \\max_{a'} Q(s', a')]`, until
    no entry moves by more than ``tol``. With :math:`\\gamma = 1` it converges when every policy the
    iteration meets reaches a terminal state, as in the random and cliff walks."""
    P, R = mdp.transitions.double(), _expected_rewards(mdp).double()
    alive = (~mdp.terminal).double()
    Q = torch.zeros_like(R)
    for _ in range(max_iterations):
        new = R + gamma * P @ (alive * Q.max(-1).values)
        if (new - Q).abs().max() <= tol:
            return new
        Q = new
    raise RuntimeError(f"value_iteration did not converge in {max_iterations} iterations (gamma={gamma}); "
                       f"use gamma < 1 or raise max_iterations")


def policy_evaluation(mdp: TabularMDP, policy: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """:math:`V^\\pi` (``(S,)``, float64) exactly: the Bellman expectation equation solved as a linear
    system, :math:`V = R^\\pi + \\gamma P^\\pi V` with the terminal states' values 0. ``policy`` is
    ``(S, A)``, each row a distribution over actions."""
    alive = (~mdp.terminal).double()
    pi = policy.double()
    P_pi = torch.einsum("sa,sat->st", pi, mdp.transitions.double()) * alive[:, None] * alive[None, :]
    R_pi = (pi * _expected_rewards(mdp).double()).sum(-1) * alive
    return torch.linalg.solve(torch.eye(mdp.num_states, dtype=torch.float64) - gamma * P_pi, R_pi)


def step(mdp: TabularMDP, states: torch.Tensor, actions: torch.Tensor, generator: torch.Generator
         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One transition of each run: ``(next_states, rewards, terminated)``, each ``(N,)``, sampled from
    ``transitions[states, actions]``. ``next_states`` is the state entered, terminal or not (the
    updates need it); the caller starts a terminated run over from ``mdp.start``."""
    # Inverse-CDF sampling, one uniform per run (torch.multinomial costs several times more per call).
    cdf = mdp.transitions[states, actions].cumsum(-1)
    next_states = (torch.rand(len(states), 1, generator=generator) > cdf).sum(-1).clamp(max=mdp.num_states - 1)
    return next_states, mdp.rewards[states, actions, next_states], mdp.terminal[next_states]


def epsilon_greedy(Q: torch.Tensor, states: torch.Tensor, epsilon: float, generator: torch.Generator) -> torch.Tensor:
    """Each run's action in its state: with probability ``epsilon`` uniformly at random, otherwise
    greedy in its table ``Q`` (``(N, S, A)``), ties broken at random (a fresh table is all ties)."""
    q = Q[torch.arange(len(states)), states]  # (N, A)
    # A random key for each tied best action, 0 for the others: the largest key is a uniform pick among the ties.
    greedy = (torch.rand(q.shape, generator=generator) * (q == q.max(-1, keepdim=True).values)).argmax(-1)
    explore = torch.rand(len(states), generator=generator) < epsilon
    uniform = torch.randint(Q.shape[-1], (len(states),), generator=generator)
    return torch.where(explore, uniform, greedy)


def td0_update(V: torch.Tensor, states: torch.Tensor, rewards: torch.Tensor, next_states: torch.Tensor,
               terminated: torch.Tensor, alpha: float | torch.Tensor, gamma: float) -> torch.Tensor:
    """TD(0): :math:`V(s) \\leftarrow V(s) + \\alpha\\,[r + \\gamma (1 - \\text{terminated}) V(s') - V(s)]`
    in each run's row of ``V`` (``(N, S)``), for the ``(N,)`` transitions (``alpha`` a float, or ``(N,)``:
    one step size per run).
    Returns a new table."""
    rows = torch.arange(len(states))
    target = rewards + gamma * (~terminated).to(V.dtype) * V[rows, next_states]
    V = V.clone()
    V[rows, states] += alpha * (target - V[rows, states])
    return V


def sarsa_update(Q: torch.Tensor, states: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
                 next_states: torch.Tensor, next_actions: torch.Tensor, terminated: torch.Tensor,
                 alpha: float | torch.Tensor, gamma: float) -> torch.Tensor:
    """SARSA: :math:`Q(s, a) \\leftarrow Q(s, a) + \\alpha\\,[r + \\gamma (1 - \\text{terminated}) Q(s', a') - Q(s, a)]`
    with :math:`a'` the action the policy takes next, in each run's table (``Q`` is ``(N, S, A)``).
    Returns a new table."""
    rows = torch.arange(len(states))
    target = rewards + gamma * (~terminated).to(Q.dtype) * Q[rows, next_states, next_actions]
    Q = Q.clone()
    Q[rows, states, actions] += alpha * (target - Q[rows, states, actions])
    return Q


def q_learning_update(Q: torch.Tensor, states: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
                      next_states: torch.Tensor, terminated: torch.Tensor, alpha: float | torch.Tensor,
                      gamma: float) -> torch.Tensor:
    """Q-learning:
    :math:`Q(s, a) \\leftarrow Q(s, a) + \\alpha\\,[r + \\gamma (1 - \\text{terminated}) \\max_{a'} Q(s', a') - Q(s, a)]`
    in each run's table (``Q`` is ``(N, S, A)``): the target is greedy whatever the behaviour policy
    does next. Returns a new table."""
    rows = torch.arange(len(states))
    target = rewards + gamma * (~terminated).to(Q.dtype) * Q[rows, next_states].max(-1).values
    Q = Q.clone()
    Q[rows, states, actions] += alpha * (target - Q[rows, states, actions])
    return Q


def _finish_episodes(done: torch.Tensor, counts: torch.Tensor, episodes: int) -> torch.Tensor:
    """The runs whose episode just ended and that still record (their count below ``episodes``)."""
    return done & (counts < episodes)


def learn_values(mdp: TabularMDP, policy: torch.Tensor, episodes: int, alpha: float, gamma: float = 1.0,
                 runs: int = 100, initial: float = 0.0, seed: int = 0) -> torch.Tensor:
    """TD(0) prediction of ``policy`` (``(S, A)``) for ``episodes`` episodes in each of ``runs``
    independent runs. Returns each run's table after each episode, ``(runs, episodes + 1, S)``
    (index 0: the initial table, ``initial`` in every non-terminal state)."""
    g = torch.Generator().manual_seed(seed)
    V = torch.full((runs, mdp.num_states), float(initial)) * (~mdp.terminal)
    history = torch.zeros(runs, episodes + 1, mdp.num_states)
    history[:, 0] = V
    counts = torch.zeros(runs, dtype=torch.long)
    states = torch.full((runs,), mdp.start)
    while bool((counts < episodes).any()):
        actions = torch.multinomial(policy[states], 1, generator=g).squeeze(1)
        next_states, rewards, terminated = step(mdp, states, actions, g)
        # A run that has its episodes waits for the others with step size 0: its table stays as recorded.
        V = td0_update(V, states, rewards, next_states, terminated, alpha * (counts < episodes), gamma)
        ended = _finish_episodes(terminated, counts, episodes)
        counts += ended.long()
        history[ended, counts[ended]] = V[ended]
        states = torch.where(terminated, mdp.start, next_states)
    return history


@dataclass
class ControlRun:
    """What :func:`learn_q` returns: the final tables ``q`` (``(runs, S, A)``), and the sum of rewards
    and the number of steps of each run's episodes, ``returns`` and ``lengths`` (``(runs, episodes)``)."""

    q: torch.Tensor
    returns: torch.Tensor
    lengths: torch.Tensor


def learn_q(mdp: TabularMDP, method: str, episodes: int, alpha: float = 0.5, epsilon: float = 0.1,
            gamma: float = 1.0, runs: int = 100, seed: int = 0) -> ControlRun:
    """SARSA (``method="sarsa"``) or Q-learning (``"q_learning"``) with an ε-greedy behaviour policy,
    for ``episodes`` episodes in each of ``runs`` independent runs, tables starting at 0."""
    if method not in ("sarsa", "q_learning"):
        raise ValueError(f"learn_q: method must be 'sarsa' or 'q_learning', got {method!r}")
    g = torch.Generator().manual_seed(seed)
    Q = torch.zeros(runs, mdp.num_states, mdp.num_actions)
    returns, lengths = torch.zeros(runs, episodes), torch.zeros(runs, episodes, dtype=torch.long)
    counts = torch.zeros(runs, dtype=torch.long)
    rows = torch.arange(runs)
    states = torch.full((runs,), mdp.start)
    actions = epsilon_greedy(Q, states, epsilon, g)
    while bool((counts < episodes).any()):
        recording = counts < episodes
        next_states, rewards, terminated = step(mdp, states, actions, g)
        following = torch.where(terminated, mdp.start, next_states)  # where each run acts next
        step_size = alpha * recording  # a run that has its episodes waits for the others, its table unchanged
        if method == "sarsa":  # a' is chosen before the update, from the table that chose a
            next_actions = epsilon_greedy(Q, following, epsilon, g)
            Q = sarsa_update(Q, states, actions, rewards, next_states, next_actions, terminated, step_size, gamma)
        else:  # Q-learning's target needs no a'; the behaviour acts on the updated table
            Q = q_learning_update(Q, states, actions, rewards, next_states, terminated, step_size, gamma)
            next_actions = epsilon_greedy(Q, following, epsilon, g)
        column = counts.clamp(max=episodes - 1)
        returns[rows, column] += rewards * recording
        lengths[rows, column] += recording
        counts += _finish_episodes(terminated, counts, episodes).long()
        states, actions = following, next_actions
    return ControlRun(Q, returns, lengths)


def greedy_path(mdp: TabularMDP, q: torch.Tensor) -> list[int]:
    """The states visited from ``mdp.start`` following :math:`\\arg\\max_a q(s, a)` (``q`` is ``(S, A)``;
    the first of tied actions), each step to its most likely next state. The path ends on a terminal
    state, or on the first state it visits again: a greedy policy that goes round in circles never
    arrives (``mdp.terminal[path[-1]]`` says which)."""
    path, seen = [mdp.start], {mdp.start}
    while not bool(mdp.terminal[path[-1]]):
        action = int(q[path[-1]].argmax())
        path.append(int(mdp.transitions[path[-1], action].argmax()))
        if path[-1] in seen:
            break
        seen.add(path[-1])
    return path
