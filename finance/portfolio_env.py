"""Portfolio allocation as a batched tensor env: the action is the target weights of the portfolio.

``StockTradingVecEnv`` trades whole shares; this env frames trading as FinRL's
portfolio-allocation env and Jiang, Xu and Liang (2017, "A Deep Reinforcement Learning Framework
for the Financial Portfolio Management Problem") do: each step the policy names the fraction of
the account to hold in each stock, the account is rebalanced to it, paying costs on what it trades,
and the market moves. Same protocol as every podracer env (``podracer.envs.base``): ``num_envs``
accounts as torch tensors on ``device``, same-step autoreset, dense ``info["final_obs"]``,
episode ends are truncations (a bust account is a termination).

Actions to weights
------------------
The action ``a`` is a Box in [-1, 1]^(S+1) (long-only) or [-1, 1]^S (long-short):

- long-only: ``w = softmax(logit_scale * a)`` over S stocks and cash (the last entry), so weights
  are >= 0 and sum to 1 (Jiang et al.'s softmax output layer, cash included);
- long-short: ``w = gross_limit * a / max(1, |a|_1)``: weights in either sign with gross exposure
  ``sum |w_i| <= gross_limit``; cash is ``1 - sum w_i`` (short proceeds stay as cash, so with
  ``gross_limit <= 1`` the account never borrows).

Rebalancing and costs (exact accounting)
----------------------------------------
Before trading, prices have moved the weights to ``w'`` (drift). Rebalancing to ``w`` trades
``V * |mu * w_i - w'_i|`` of stock i, where ``mu = V_after / V`` is the fraction of the value left
after costs (Jiang et al.'s transaction remainder factor). With proportional costs ``c``::

    mu = 1 - c * sum_i |mu * w_i - w'_i|

solved by fixed-point iteration: a contraction whose steps shrink the error by ``c * sum |w_i|``
(the cost rate times the gross exposure, at most ``c * gross_limit``), so ``cost_iterations`` of
them take it below 1e-15 (5 at c = 1e-3 and gross 1; 50 at a rate of 0.5). The env refuses
``c * gross_limit >= 0.5``, where a full turnover would cost half the account or more. Costs are
``V * (1 - mu)`` exactly, so ``value_after_trading = value_before - costs`` holds to float rounding,
and the positions are exactly ``mu * V * w`` (the target weights of the smaller account). Short positions pay a borrow
fee, ``borrow_rate / periods_per_year`` of the shorted value per step, from cash.

Timing: ``execution="next_close"`` (the default after 1.1.0) holds the old positions through the
next day and trades at its close (the realistic one-bar delay); ``"close"`` (the default up to
1.1.0, an explicit opt-in now that warns, ``finance.OptimisticExecutionWarning``) trades at the
close the policy just observed: optimistic, nobody can trade at a close after seeing it. The reward compares the account value
after the step's trade and mark with the value before it. Either way an episode over the whole
data is ``T - 1`` steps: with ``"next_close"`` the last step's trade, at the last close, pays its
costs and is never marked.

Rewards (``reward=``)
---------------------
With ``r = V_{t+1} / V_t - 1`` the step's simple return:

- ``"log_return"`` (default, Jiang et al.): ``log(1 + r)``; a sum over an episode is the log
  growth of the account, which a discounted sum approximates.
- ``"value_change"``: ``r * V_t / V_0``, the change in value in units of the initial value
  (what ``StockTradingVecEnv`` pays).
- ``"differential_sharpe"`` (Moody and Saffell 2001): ``D_t`` of ``differential_sharpe`` (its
  docstring has the formula), the first-order effect of this step's return on a Sharpe ratio of
  exponential moving moments with decay ``dsr_eta``; ``A_0 = 0`` and ``B_0 = dsr_init_var`` (a
  daily variance) so the first steps are defined. Each account carries its ``A_t``, ``B_t``
  through its episode.
- ``"drawdown_penalty"``: ``log(1 + r) - risk_penalty * (DD_{t+1} - DD_t)^+``, where
  ``DD = 1 - V / max V`` is the drawdown this episode: deepening a drawdown costs extra.
- ``"volatility_penalty"``: ``log(1 + r) - risk_penalty * (r - A_{t-1})^2``, a mean-variance utility
  with the running mean ``A`` above.

``reward_scale`` multiplies each (default 100, a 1% day is about 1; 1 for the differential Sharpe,
already about a per-step Sharpe ratio).

Observation (float32), ``S * window + (S + 1) + F * S`` values, names in ``env.obs_names``
----------------------------------------------------------------------------------------
The last ``window`` daily log returns of each stock up to day t (zeros before the data starts),
times ``return_scale``; the current weights ``w'`` (stocks then cash, after drift); ``features[t]``
feature-major, as given (scale them on the training dates). Row t uses data up to day t only.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
import torch

from finance.data.checks import check_int, check_number
from finance.env import ArrayLike, _check_flag, _close_array, _features_array, warn_optimistic
from podracer.envs import TensorVecEnv

REWARDS = ("log_return", "value_change", "differential_sharpe", "drawdown_penalty", "volatility_penalty")
EXECUTIONS = ("close", "next_close")
COST_TOLERANCE = 1e-15  # mu's error after the fixed-point steps (module doc)


def target_weights(actions: torch.Tensor, long_short: bool, gross_limit: float, logit_scale: float) -> torch.Tensor:
    """(N, S+1) target weights, stocks then cash, from actions in [-1, 1] (module doc)."""
    a = actions.clamp(-1.0, 1.0)
    if not long_short:
        return torch.softmax(a * logit_scale, dim=1)
    w = a * (gross_limit / a.abs().sum(1, keepdim=True).clamp(min=1.0))
    return torch.cat([w, 1.0 - w.sum(1, keepdim=True)], dim=1)


@functools.lru_cache(maxsize=64)  # called every env step with the env's one rate
def cost_iterations(rate: float) -> int:
    """Fixed-point steps that take ``mu``'s error (at most 1 to start) below ``COST_TOLERANCE`` when
    each step shrinks it by ``rate`` = cost rate x the largest gross exposure, ``0 <= rate < 1``."""
    if not 0 <= rate < 1:
        raise ValueError(f"the cost rate times the gross exposure must be below 1, got {rate:g}")
    return 1 if rate == 0 else max(1, math.ceil(math.log(COST_TOLERANCE) / math.log(rate)))


def rebalance_remainder(target: torch.Tensor, drifted: torch.Tensor, cost_pct: float,
                        gross: float = 1.0) -> torch.Tensor:
    """``mu`` (N,): the fraction of the account left after paying ``cost_pct`` on the trades that
    take the stock weights ``drifted`` (N, S) to ``mu * target`` (N, S); fixed point of
    ``mu = 1 - c * sum |mu * target - drifted|``. ``gross`` bounds ``sum |target|`` (1 long-only;
    ``gross_limit`` long-short): the steps shrink the error by ``c * gross`` each."""
    mu = 1.0 - cost_pct * (target - drifted).abs().sum(1)
    for _ in range(cost_iterations(cost_pct * max(gross, 1.0)) - 1):
        mu = 1.0 - cost_pct * (mu[:, None] * target - drifted).abs().sum(1)
    return mu


def differential_sharpe_step(r: torch.Tensor, mean: torch.Tensor, second: torch.Tensor, eta: float
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of ``differential_sharpe``: ``(D_t, A_t, B_t)`` from the returns ``r`` and
    ``A_{t-1}``, ``B_{t-1}`` (tensors of one shape). The env's reward calls it."""
    dA, dB = r - mean, r * r - second
    variance = (second - mean * mean).clamp(min=1e-12)  # > 0 when B_0 > A_0^2 (Jensen); the floor guards round-off
    return (second * dA - 0.5 * mean * dB) / variance ** 1.5, mean + eta * dA, second + eta * dB


def differential_sharpe(returns: ArrayLike | torch.Tensor, eta: float = 0.01, init_mean: float = 0.0,
                        init_second: float = 1e-4) -> np.ndarray | pd.Series | torch.Tensor:
    """The differential Sharpe ratio ``D_t`` of Moody and Saffell (2001, "Learning to Trade via Direct
    Reinforcement", IEEE Trans. Neural Networks 12(4)) for each return of ``returns``.

    With ``R_t`` the return of step t and exponential moving estimates of its first and second moments,
    ``A_t = A_{t-1} + eta dA_t`` and ``B_t = B_{t-1} + eta dB_t``, where ``dA_t = R_t - A_{t-1}`` and
    ``dB_t = R_t^2 - B_{t-1}``::

        D_t = (B_{t-1} dA_t - A_{t-1} dB_t / 2) / (B_{t-1} - A_{t-1}^2)^(3/2)

    ``D_t`` is ``dS_t / d eta`` at ``eta = 0`` for the moving Sharpe ratio ``S_t = A_t / sqrt(B_t - A_t^2)``:
    how much this return raises the Sharpe ratio, so ``S_t ~ S_{t-1} + eta D_t``. A reward of ``D_t``
    per step trains for risk-adjusted return online.

    Args:
        returns: (T,) or (T, N) per-step simple returns, time first (an array, a Series or a tensor).
        eta: the moments' decay, in (0, 1) (0.01 ~ a 100-step memory).
        init_mean, init_second: ``A_0`` and ``B_0``; ``B_0 > A_0^2`` (a prior variance) keeps the first
            ``D_t`` finite.

    Returns ``D`` of the shape of ``returns``: a tensor for a tensor, a Series for a Series, else an array.
    """
    eta, a0 = check_number(eta, "eta"), check_number(init_mean, "init_mean")
    b0 = check_number(init_second, "init_second")
    if not 0 < eta < 1:
        raise ValueError(f"eta must be in (0, 1) (the moments' decay; 0.01 ~ a 100-step memory), got {eta}")
    if b0 <= a0 * a0:
        raise ValueError(f"init_second must exceed init_mean^2 (B_0 - A_0^2 is the prior variance), got B_0={b0}, "
                         f"A_0={a0}; the default B_0=1e-4 is a 1% daily volatility")
    r = returns if isinstance(returns, torch.Tensor) else torch.as_tensor(np.array(returns, dtype=np.float64))
    if r.dim() not in (1, 2):
        raise ValueError(f"returns must be a (T,) or (T, N) series of per-step returns, got shape {tuple(r.shape)}")
    if not bool(torch.isfinite(r).all()):
        raise ValueError("returns has NaN or inf; drop or fill them before computing the differential Sharpe ratio")
    mean, second = torch.full_like(r[0], a0), torch.full_like(r[0], b0)
    out = torch.empty_like(r)
    for t in range(len(r)):
        out[t], mean, second = differential_sharpe_step(r[t], mean, second, eta)
    if isinstance(returns, torch.Tensor):
        return out
    if isinstance(returns, pd.Series):
        return pd.Series(out.numpy(), index=returns.index, name="differential_sharpe")
    return out.numpy()


class PortfolioVecEnv(TensorVecEnv):
    """``num_envs`` accounts that choose target portfolio weights over one history of closes.

    Args:
        close: daily closes, dates x tickers DataFrame or (T, S) array; finite and > 0.
        features: optional per-stock indicators known at each close, as ``StockTradingVecEnv`` takes them.
        num_envs: accounts stepped together.
        device: torch device of every tensor.
        window: daily log returns per stock in the observation (>= 1).
        cost_pct: proportional cost on traded value, in [0, 0.1].
        long_short: allow short weights (gross exposure limited by ``gross_limit``); off: softmax weights.
        gross_limit: max ``sum |w_i|`` when ``long_short`` (> 0; above 1 is leverage paid for with cash borrowed at 0).
        borrow_rate: annual fee on the value of short positions (long_short only), >= 0.
        periods_per_year: bars per year, for ``borrow_rate`` (252 for daily equities).
        logit_scale: softmax temperature of the long-only weights (a = +-1 -> weight ratio e^(2 * scale)).
        reward: one of ``REWARDS`` (module doc).
        reward_scale: multiplies the reward (> 0); None: 100 for the return-based rewards (a 1% day
            is about 1), 1 for ``"differential_sharpe"`` (already in units of a per-step Sharpe).
        risk_penalty: lambda of the drawdown and volatility penalties (>= 0).
        dsr_eta: decay of the moving moments of the differential Sharpe and volatility rewards, in (0, 1).
        dsr_init_var: B_0, the starting second moment of the differential Sharpe ratio (> 0).
        execution: ``"next_close"`` (default, causal) or ``"close"`` (optimistic, warns) (module doc).
        episode_length: steps per episode; None runs from the first day to the last.
        random_start: start each episode on a random day (needs ``episode_length``).
        seed: seeds ``self.rng`` (start days); ``reset(seed)`` reseeds it.
        return_scale: multiplies the log returns in the observation (10: a 1% day reads about 0.1).
        dtype: accounting dtype, float64 (default) or float32.
        validate_actions: check every action batch (shape, dtype, device, finite).

    Per account (N,) tensors: ``value`` (in units of the initial value 1.0), ``day``; (N, S+1)
    ``weights`` (after drift, stocks then cash).
    """

    task = "portfolio"  # make_agent picks the "portfolio" presets (finance/presets.yaml)

    def __init__(self, close: ArrayLike, features: ArrayLike | None = None, num_envs: int = 1,
                 device: str | torch.device = "cpu", window: int = 20, cost_pct: float = 1e-3,
                 long_short: bool = False, gross_limit: float = 1.0, borrow_rate: float = 0.0,
                 periods_per_year: float = 252.0, logit_scale: float = 3.0, reward: str = "log_return",
                 reward_scale: float | None = None, risk_penalty: float = 0.0, dsr_eta: float = 0.01,
                 dsr_init_var: float = 1e-4, execution: str = "next_close", episode_length: int | None = None,
                 random_start: bool = False, seed: int | None = None, return_scale: float = 10.0,
                 dtype: torch.dtype = torch.float64, validate_actions: bool = True):
        num_envs = check_int(num_envs, "num_envs", low=1)
        super().__init__(num_envs, device, _check_flag(validate_actions, "validate_actions"))
        close_np, self.dates, self.tickers = _close_array(close)
        T, S = close_np.shape
        if T < 2:
            raise ValueError(f"close has {T} day(s); an episode needs at least 2 (rebalance on one, mark on the next)")
        self.num_days, self.num_stocks = T, S
        self._set_rules(window, cost_pct, long_short, gross_limit, borrow_rate, periods_per_year, logit_scale,
                        reward, reward_scale, risk_penalty, dsr_eta, dsr_init_var, execution, return_scale, dtype)
        self._set_episodes(episode_length, random_start)
        self._set_data(close_np, close, features)
        self._seed(None if seed is None else check_int(seed, "seed"))
        self.reset()

    # -- set-up
    def _set_rules(self, window: Any, cost_pct: Any, long_short: Any, gross_limit: Any, borrow_rate: Any,
                   periods_per_year: Any, logit_scale: Any, reward: Any, reward_scale: Any, risk_penalty: Any,
                   dsr_eta: Any, dsr_init_var: Any, execution: Any, return_scale: Any, dtype: Any) -> None:
        """Check and store the rules; each bad value is a ValueError naming it and the fix."""
        self.window = check_int(window, "window", low=1, high=self.num_days)
        self.cost_pct = check_number(cost_pct, "cost_pct")
        if not 0 <= self.cost_pct <= 0.1:
            raise ValueError(f"cost_pct must be in [0, 0.1] (a fraction of traded value: 0.001 is 10 bp), "
                             f"got {self.cost_pct}")
        self.long_short = _check_flag(long_short, "long_short")
        self.gross_limit = check_number(gross_limit, "gross_limit")
        self.borrow_rate = check_number(borrow_rate, "borrow_rate")
        self.periods_per_year = check_number(periods_per_year, "periods_per_year")
        self.logit_scale = check_number(logit_scale, "logit_scale")
        if reward_scale is None:
            reward_scale = 1.0 if reward == "differential_sharpe" else 100.0
        self.reward_scale = check_number(reward_scale, "reward_scale")
        self.risk_penalty = check_number(risk_penalty, "risk_penalty")
        self.dsr_eta, self.dsr_init_var = check_number(dsr_eta, "dsr_eta"), check_number(dsr_init_var, "dsr_init_var")
        self.return_scale = check_number(return_scale, "return_scale")
        for name in ("gross_limit", "periods_per_year", "logit_scale", "reward_scale", "dsr_init_var", "return_scale"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("borrow_rate", "risk_penalty"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 < self.dsr_eta < 1:
            raise ValueError(f"dsr_eta must be in (0, 1) (the moving moments' decay; 0.01 ~ a 100-day memory), "
                             f"got {self.dsr_eta}")
        self.exposure = self.gross_limit if self.long_short else 1.0  # the largest sum |w_i| of a target
        if self.cost_pct * self.exposure >= 0.5:
            # Found by review: at cost_pct 0.1 and gross_limit 10 the costs' fixed point no longer converged
            # (a full trade cost nothing), at 20 it gave a value of -1.
            raise ValueError(f"cost_pct * gross_limit must be below 0.5 (a full turnover would cost half the "
                             f"account or more), got {self.cost_pct:g} * {self.gross_limit:g}; lower either")
        if self.borrow_rate > 0 and not self.long_short:
            raise ValueError("borrow_rate is the fee on short positions: pass long_short=True, or leave it at 0")
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {REWARDS}, got {reward!r}")
        if execution not in EXECUTIONS:
            raise ValueError(f"execution must be one of {EXECUTIONS}, got {execution!r}")
        if execution == "close":
            warn_optimistic("PortfolioVecEnv")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float64 or torch.float32, got {dtype}")
        self.reward, self.execution, self.dtype = reward, execution, dtype

    def _set_episodes(self, episode_length: Any, random_start: Any) -> None:
        """Episode length and start days: a step moves one day, under either execution."""
        last = self.num_days - 1  # steps from day 0 to the last day
        if episode_length is not None:
            episode_length = check_int(episode_length, "episode_length", low=1, high=last)
        self.random_start = _check_flag(random_start, "random_start")
        if self.random_start and episode_length is None:
            raise ValueError("random_start=True needs episode_length (steps per episode), e.g. episode_length=252")
        self.episode_length = episode_length
        self._max_steps = episode_length if episode_length is not None else last
        self._max_start = self.num_days - 1 - self._max_steps

    def _set_data(self, close_np: np.ndarray, close: Any, features: Any) -> None:
        T, S, W, dev = self.num_days, self.num_stocks, self.window, self.device
        self.close_prices = torch.as_tensor(close_np, dtype=self.dtype, device=dev)  # (T, S)
        growth = close_np[1:] / close_np[:-1]  # (T-1, S): day t -> t+1
        self.growth = torch.as_tensor(np.vstack([growth, np.ones((1, S))]), dtype=self.dtype, device=dev)  # (T, S)
        log_ret = np.vstack([np.zeros((1, S)), np.log(growth)])  # (T, S): row t is day t-1 -> t, known at t
        padded = np.vstack([np.zeros((W - 1, S)), log_ret])
        windows = np.stack([padded[i:i + T] for i in range(W)], axis=2)  # (T, S, W): oldest first
        if features is not None:
            feat_np, self.feature_names = _features_array(features, self.dates, self.tickers,
                                                          isinstance(close, pd.DataFrame))
        else:
            feat_np, self.feature_names = np.zeros((T, S, 0), np.float32), []
        market = np.concatenate([(windows * self.return_scale).reshape(T, S * W),
                                 feat_np.transpose(0, 2, 1).reshape(T, -1)], axis=1)
        self.obs_table = torch.as_tensor(market.astype(np.float32), device=dev)  # (T, S*W + F*S)
        self.obs_names = ([f"log_return[t-{W - 1 - k}]/{t}" for t in self.tickers for k in range(W)]
                          + [f"weight/{t}" for t in self.tickers] + ["weight/cash"]
                          + [f"{f}/{t}" for f in self.feature_names for t in self.tickers])
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(len(self.obs_names),),
                                                       dtype=np.float32)
        act_dim = S if self.long_short else S + 1
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, shape=(act_dim,), dtype=np.float32)

    # -- protocol
    def _observe(self, weights: torch.Tensor, day: torch.Tensor) -> torch.Tensor:
        S, W = self.num_stocks, self.window
        market = self.obs_table.index_select(0, day)
        return torch.cat([market[:, :S * W], weights.float(), market[:, S * W:]], dim=1)

    def _fresh(self, n: int) -> dict[str, torch.Tensor]:
        """Starting state of ``n`` accounts: all cash, value 1, moments at their priors."""
        z = torch.zeros(n, dtype=self.dtype, device=self.device)
        weights = torch.zeros(n, self.num_stocks + 1, dtype=self.dtype, device=self.device)
        weights[:, -1] = 1.0
        return {"value": z + 1.0, "peak": z + 1.0, "weights": weights, "mean": z.clone(), "second": z + self.dsr_init_var}

    def _starts(self) -> torch.Tensor:
        if not self.random_start:
            return torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        return torch.randint(0, self._max_start + 1, (self.num_envs,), generator=self.rng, device=self.device)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        """Start every account with all cash and value 1.0. Returns obs and info (``account_value``, ``weights``, ``day``)."""
        if options:
            raise ValueError(f"PortfolioVecEnv.reset takes no options, got {sorted(options)}")
        self._seed(None if seed is None else check_int(seed, "seed"))
        self.day = self._starts()
        self.elapsed = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        state = self._fresh(self.num_envs)
        self.value, self.peak, self.weights = state["value"], state["peak"], state["weights"]
        self.mean, self.second = state["mean"], state["second"]
        self.total_costs = torch.zeros(self.num_envs, dtype=self.dtype, device=self.device)
        info = {"account_value": self.value.clone(), "weights": self.weights.clone(), "day": self.day.clone()}
        return self._observe(self.weights, self.day), info

    def _trade(self, value: torch.Tensor, weights: torch.Tensor, target: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rebalance accounts of ``value`` holding ``weights`` to ``target``: (value after costs,
        costs, traded value), each (N,). Positions after it are ``target`` of the new value."""
        mu = rebalance_remainder(target[:, :-1], weights[:, :-1], self.cost_pct, self.exposure)
        traded = value * (mu[:, None] * target[:, :-1] - weights[:, :-1]).abs().sum(1)
        return value * mu, value * (1.0 - mu), traded

    def _hold(self, value: torch.Tensor, weights: torch.Tensor, day: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Hold positions ``weights`` of ``value`` from day to day + 1: (value, drifted weights, borrow fee)."""
        growth = self.growth.index_select(0, day)  # (N, S)
        money = weights[:, :-1] * growth  # per unit of value, stocks only; cash earns 0
        fee = torch.zeros_like(value)
        if self.long_short and self.borrow_rate > 0:
            fee = value * weights[:, :-1].clamp(max=0.0).neg().sum(1) * (self.borrow_rate / self.periods_per_year)
        cash = weights[:, -1] - fee / value
        new_value = value * (money.sum(1) + cash)
        alive = new_value > 0  # a bust account (long-short only) ends its episode: its weights are not shown
        drifted = torch.cat([money, cash[:, None]], dim=1) * torch.where(alive, value / new_value, 0.0)[:, None]
        return new_value, drifted, fee

    def step(self, actions: torch.Tensor):
        """Rebalance to the target weights (now or at the next close), mark at the next close.

        ``info``: ``account_value`` (N,) after the step, ``weights`` (N, S+1) after drift,
        ``holdings`` (N, S) shares held after the step's trade (value per price, the initial value
        being 1.0; ``finance.backtest`` reads them), ``costs``, ``traded_value``, ``borrow_fee``,
        ``turnover`` (traded value / value before) and ``total_costs`` this episode, ``day``, plus
        ``final_obs`` / ``_final_obs``."""
        self._check(actions)
        target = target_weights(actions.to(self.dtype), self.long_short, self.gross_limit, self.logit_scale)
        value0 = self.value
        day = self.day + 1
        if self.execution == "close":
            value, costs, traded = self._trade(value0, self.weights, target)
            holdings = value[:, None] * target[:, :-1] / self.close_prices.index_select(0, self.day)
            value, weights, fee = self._hold(value, target, self.day)
        else:  # hold yesterday's positions one more day, trade at that close
            value, weights, fee = self._hold(value0, self.weights, self.day)
            value, costs, traded = self._trade(value, weights, target)
            holdings = value[:, None] * target[:, :-1] / self.close_prices.index_select(0, day)
            weights = target
        rewards = self._reward(value0, value)
        bust = value <= 0
        elapsed = self.elapsed + 1
        truncated = (elapsed >= self._max_steps) & ~bust
        terminated = bust
        total_costs = self.total_costs + costs
        info = {"account_value": value, "weights": weights, "holdings": holdings, "costs": costs,
                "traded_value": traded, "borrow_fee": fee, "turnover": traded / value0, "total_costs": total_costs,
                "day": day}
        final_obs = self._observe(weights, day)
        self.value, self.weights, self.day, self.elapsed, self.total_costs = value, weights, day, elapsed, total_costs
        obs = self._autoreset(terminated | truncated, final_obs)
        info["final_obs"], info["_final_obs"] = final_obs, terminated | truncated
        return obs, rewards, terminated, truncated, info

    def _reward(self, value0: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """The step's reward (module doc); updates the moving moments and the peak."""
        r = value / value0 - 1.0
        log_r = torch.log(value.clamp(min=1e-12) / value0)
        mean = self.mean
        dsr, self.mean, self.second = differential_sharpe_step(r, mean, self.second, self.dsr_eta)
        if self.reward == "value_change":
            out = value - value0  # the initial value is 1.0
        elif self.reward == "differential_sharpe":
            out = dsr
        elif self.reward == "drawdown_penalty":
            peak = torch.maximum(self.peak, value)
            deeper = (1.0 - value / peak) - (1.0 - value0 / self.peak)
            out = log_r - self.risk_penalty * deeper.clamp(min=0.0)
        elif self.reward == "volatility_penalty":
            out = log_r - self.risk_penalty * (r - mean) ** 2
        else:
            out = log_r
        self.peak = torch.maximum(self.peak, value)
        return (out * self.reward_scale).float()

    def _autoreset(self, done: torch.Tensor, final_obs: torch.Tensor) -> torch.Tensor:
        """Same-step autoreset of the accounts where ``done``; the others keep ``final_obs``."""
        if not bool(done.any()):
            return final_obs
        fresh = self._fresh(self.num_envs)
        self.day = torch.where(done, self._starts(), self.day)
        self.elapsed = self.elapsed.masked_fill(done, 0)
        self.total_costs = self.total_costs.masked_fill(done, 0.0)
        for name in ("value", "peak", "mean", "second"):
            setattr(self, name, torch.where(done, fresh[name], getattr(self, name)))
        self.weights = torch.where(done[:, None], fresh["weights"], self.weights)
        return torch.where(done[:, None], self._observe(self.weights, self.day), final_obs)

    def evaluation_env(self, num_envs: int = 1, **overrides: Any) -> "PortfolioVecEnv":
        """A deterministic copy on the same data: episodes from the first day to the last."""
        kwargs = dict(num_envs=num_envs, device=self.device, window=self.window, cost_pct=self.cost_pct,
                      long_short=self.long_short, gross_limit=self.gross_limit, borrow_rate=self.borrow_rate,
                      periods_per_year=self.periods_per_year, logit_scale=self.logit_scale, reward=self.reward,
                      reward_scale=self.reward_scale, risk_penalty=self.risk_penalty, dsr_eta=self.dsr_eta,
                      dsr_init_var=self.dsr_init_var, execution=self.execution, return_scale=self.return_scale,
                      dtype=self.dtype, validate_actions=self.validate_actions)
        kwargs.update(overrides)
        return PortfolioVecEnv(self.close_frame(), self._features_frame(), **kwargs)

    def _features_frame(self) -> pd.DataFrame | None:
        if not self.feature_names:
            return None
        S, W = self.num_stocks, self.window
        feat = self.obs_table[:, S * W:].cpu().numpy()  # feature-major, (T, F*S)
        return pd.DataFrame(feat, index=self.dates,
                            columns=pd.MultiIndex.from_product([self.feature_names, self.tickers]))

    def close_frame(self) -> pd.DataFrame:
        """The closes as a dates x tickers DataFrame."""
        return pd.DataFrame(self.close_prices.cpu().numpy(), index=self.dates, columns=self.tickers)

    def __repr__(self) -> str:
        kind = f"long-short (gross <= {self.gross_limit})" if self.long_short else "long-only"
        return (f"PortfolioVecEnv(num_envs={self.num_envs}, days={self.num_days}, stocks={self.num_stocks}, {kind}, "
                f"reward={self.reward!r}, execution={self.execution!r}, device={self.device})")
