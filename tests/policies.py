"""A test policy of pre-drawn random actions, shared by the CPU and GPU tests."""
import torch
from tensordict import TensorDict
from torchrl.data import OneHot


def pre_drawn_policy(env, steps, seed=0, device="cpu"):
    """Random actions drawn once on the CPU, replayed identically on any env and backend."""
    g = torch.Generator().manual_seed(seed)
    spec = env.full_action_spec
    draws = []
    for _ in range(steps):
        td = TensorDict(batch_size=env.batch_size)
        for key in env.action_keys:
            s = spec[key]
            u = torch.rand(s.shape, generator=g)
            if s.dtype.is_floating_point:  # a Bounded spec: uniform between its bounds
                low, high = s.space.low.cpu(), s.space.high.cpu()
                td.set(key, low + u * (high - low))
                continue
            if isinstance(s, OneHot):  # a random index, one-hot
                index = (u[..., 0] * s.space.n).long()
                td.set(key, torch.nn.functional.one_hot(index, s.space.n).to(s.dtype))
                continue
            high = s.nvec.cpu() if hasattr(s, "nvec") else torch.full(s.shape, s.space.n)
            td.set(key, (u * high).long())
        draws.append(td.to(device))
    it = iter(draws)

    def policy(tensordict):
        return tensordict.update(next(it))

    return policy
