"""The device replay buffer: batched adds, wrap-around, final_obs, sampling, seeding, state_dict."""

import io

import pytest
import torch

from podracer.agents.replay import Batch, ReplayBuffer
from podracer.envs import PendulumVecEnv

# CUDA joins in where present; CPU-only machines run the same tests on CPU.
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def fill(buf: ReplayBuffer, start: int, n: int, obs_dim: int = 3, act_dim: int = 1) -> None:
    """Add n transitions whose every field encodes its global index start..start+n-1."""
    idx = torch.arange(start, start + n, dtype=torch.float32, device=buf.device)
    buf.add(idx[:, None].expand(n, obs_dim), idx[:, None].expand(n, act_dim), idx,
            idx[:, None].expand(n, obs_dim) + 0.5, idx.long() % 2 == 1)


@pytest.mark.parametrize("device", DEVICES)
def test_batched_add_stores_rows_in_order(device):
    buf = ReplayBuffer(10, obs_dim=3, action_shape=(1,), device=device)
    fill(buf, 0, 4)
    assert len(buf) == 4 and buf.pos == 4
    assert buf.rewards[:4].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert buf.next_obs[:4, 0].tolist() == [0.5, 1.5, 2.5, 3.5]
    assert buf.terminated[:4].tolist() == [False, True, False, True]
    assert buf.obs.device.type == torch.device(device).type


def test_wrap_around_overwrites_the_oldest():
    buf = ReplayBuffer(5, obs_dim=3, action_shape=(1,))
    fill(buf, 0, 3)
    fill(buf, 3, 3)  # rows 3, 4 fill the end; the sixth transition wraps to row 0
    assert len(buf) == 5 and buf.pos == 1
    assert buf.rewards.tolist() == [5.0, 1.0, 2.0, 3.0, 4.0]
    fill(buf, 6, 5)  # a batch as large as the ring: rows 1..4 then 0
    assert buf.rewards.tolist() == [10.0, 6.0, 7.0, 8.0, 9.0]
    assert buf.pos == 1 and len(buf) == 5
    assert torch.equal(buf.next_obs[:, 0], buf.rewards + 0.5)  # fields stay aligned across the wrap


def test_add_rejects_bad_batches():
    buf = ReplayBuffer(4, obs_dim=3, action_shape=(1,))
    with pytest.raises(ValueError, match="capacity 4"):
        fill(buf, 0, 5)
    with pytest.raises(ValueError, match="expected a batch of shape"):
        buf.add(torch.zeros(2, 3), torch.zeros(2, 2), torch.zeros(2), torch.zeros(2, 3),
                torch.zeros(2, dtype=torch.bool))
    with pytest.raises(RuntimeError, match="empty"):
        buf.sample(2)


def test_final_obs_is_stored_at_truncation():
    """The buffer keeps what the agent passes as next_obs: info["final_obs"], not the reset obs."""
    env = PendulumVecEnv(num_envs=4, max_episode_steps=3)
    buf = ReplayBuffer(100, obs_dim=3, action_shape=(1,))
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        actions = torch.zeros(4, 1)
        next_obs, rewards, terminated, truncated, info = env.step(actions)
        buf.add(obs, actions, rewards, info["final_obs"], terminated)
        obs = next_obs
    assert truncated.all() and not terminated.any()
    last = slice(8, 12)
    assert torch.equal(buf.next_obs[last], info["final_obs"])
    assert not torch.allclose(buf.next_obs[last], next_obs)  # the reset obs differs
    assert not buf.terminated[:12].any()  # a timeout is not a termination
    assert torch.equal(buf.obs[4:8], buf.next_obs[0:4])  # s' of one step is s of the next


@pytest.mark.parametrize("device", DEVICES)
def test_sample_shapes_dtypes_devices(device):
    buf = ReplayBuffer(50, obs_dim=3, action_shape=(2,), device=device, seed=0)
    fill(buf, 0, 20, act_dim=2)
    b = buf.sample(7)
    assert isinstance(b, Batch)
    assert b.obs.shape == (7, 3) and b.next_obs.shape == (7, 3) and b.actions.shape == (7, 2)
    assert b.rewards.shape == (7,) and b.terminated.shape == (7,) and b.terminated.dtype == torch.bool
    assert all(t.device.type == torch.device(device).type for t in b)
    assert (b.rewards < 20).all()  # only filled rows are drawn
    assert torch.equal(b.obs[:, 0], b.rewards) and torch.equal(b.next_obs[:, 0], b.rewards + 0.5)

    discrete = ReplayBuffer(10, obs_dim=3, action_shape=(), action_dtype=torch.long, device=device)
    discrete.add(torch.zeros(4, 3), torch.tensor([0, 1, 2, 1], device=device), torch.zeros(4),
                 torch.zeros(4, 3), torch.zeros(4, dtype=torch.bool))
    a = discrete.sample(5).actions
    assert a.shape == (5,) and a.dtype == torch.long


def test_sampling_is_deterministic_given_seed():
    def draws(seed: int) -> torch.Tensor:
        buf = ReplayBuffer(100, obs_dim=3, action_shape=(1,), seed=seed)
        fill(buf, 0, 60)
        return torch.stack([buf.sample(16).rewards for _ in range(3)])

    assert torch.equal(draws(1), draws(1))
    assert not torch.equal(draws(1), draws(2))


def test_sample_gathers_the_drawn_rows():
    """``sample`` gathers with index_select (faster on a CPU): the very rows plain indexing gives."""
    buf = ReplayBuffer(100, obs_dim=3, action_shape=(1,), seed=0)
    fill(buf, 0, 60)
    state = buf.generator.get_state()
    batch = buf.sample(32)
    buf.generator.set_state(state)
    idx = torch.randint(0, len(buf), (32,), generator=buf.generator)
    for got, store in zip(batch, (buf.obs, buf.actions, buf.rewards, buf.next_obs, buf.terminated)):
        assert torch.equal(got, store[idx])


def test_state_dict_round_trip_through_weights_only_load():
    buf = ReplayBuffer(5, obs_dim=3, action_shape=(1,), seed=3)
    fill(buf, 0, 4)
    fill(buf, 4, 3)  # wrapped: rows hold 5, 6, 2, 3, 4
    f = io.BytesIO()
    torch.save(buf.state_dict(), f)
    f.seek(0)
    state = torch.load(f, weights_only=True)
    assert state["rewards"].tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]  # oldest first

    same = ReplayBuffer(5, obs_dim=3, action_shape=(1,))
    same.load_state_dict(state)
    assert same.rewards.tolist() == [2.0, 3.0, 4.0, 5.0, 6.0] and len(same) == 5
    assert torch.equal(same.generator.get_state(), buf.generator.get_state())  # the sampling stream continues
    assert same.num_added == buf.num_added == 7
    fill(same, 7, 1)  # the next add overwrites the oldest (2)
    assert sorted(same.rewards.tolist()) == [3.0, 4.0, 5.0, 6.0, 7.0]

    small = ReplayBuffer(3, obs_dim=3, action_shape=(1,))
    small.load_state_dict(state)  # keeps the newest rows
    assert small.rewards.tolist() == [4.0, 5.0, 6.0] and len(small) == 3


def test_num_added_counts_overwritten_transitions_too():
    buf = ReplayBuffer(5, obs_dim=3, action_shape=(1,))
    fill(buf, 0, 4)
    fill(buf, 4, 4)
    assert len(buf) == 5 and buf.num_added == 8  # the agents' warm-up counts what was collected


def test_state_from_another_device_or_version_loads():
    """A CUDA generator state (16 bytes) does not fit a CPU generator (5056): the buffer reseeds
    from it deterministically instead of failing. 0.1 states (``rng``, no ``num_added``) load too."""
    buf = ReplayBuffer(10, obs_dim=3, action_shape=(1,), seed=3)
    fill(buf, 0, 6)
    state = buf.state_dict()
    cuda_like = {**state, "generator": torch.arange(16, dtype=torch.uint8), "generator_device": "cuda"}
    a, b = ReplayBuffer(10, obs_dim=3, action_shape=(1,)), ReplayBuffer(10, obs_dim=3, action_shape=(1,))
    a.load_state_dict(cuda_like)
    b.load_state_dict(cuda_like)
    assert torch.equal(a.sample(8).rewards, b.sample(8).rewards) and len(a) == 6

    old = {k: v for k, v in state.items() if k not in ("generator", "generator_device", "num_added")}
    old["rng"] = state["generator"]
    c = ReplayBuffer(10, obs_dim=3, action_shape=(1,))
    c.load_state_dict(old)
    assert torch.equal(c.generator.get_state(), buf.generator.get_state()) and c.num_added == 6
