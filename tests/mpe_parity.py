"""What every MPE test against VMAS 1.5.2 shares: the error check, VMAS's entities in our
order, and writing and reading VMAS's state (the scenario harnesses, tests/mpe_goal_parity.py
and tests/mpe_comm_parity.py, and the scenario tests build on these)."""
import torch


class Errors(dict):
    """The largest error seen per quantity (for inspection), and the check itself."""

    def close(self, ours, theirs, what):
        """Within 1e-5, absolute below magnitude 1, relative above."""
        ours, theirs = ours.double(), theirs.double()
        assert ours.shape == theirs.shape, f"{what}: shapes {tuple(ours.shape)} != VMAS's {tuple(theirs.shape)}"
        err = (ours - theirs).abs() / theirs.abs().clamp(min=1.0)
        worst = err.max().item() if err.numel() else 0.0
        key = what.split(",")[0]
        self[key] = max(self.get(key, 0.0), worst)
        assert worst <= 1e-5, f"{what}: max error {worst:.3g}"


def entities(venv):
    """VMAS's entities in our order: agents, then landmarks (its world.entities puts landmarks first)."""
    return venv.world.agents + venv.world.landmarks


def load_vmas(venv, pos, vel):
    """Every entity's position and velocity (``[E, n_entities, 2]``, our order) into VMAS's env."""
    for i, e in enumerate(entities(venv)):
        e.set_pos(pos[:, i].clone(), batch_index=None)
        e.set_vel(vel[:, i].clone(), batch_index=None)


def vmas_state(venv):
    """VMAS's positions and velocities, ``[E, n_entities, 2]`` each, in our order."""
    ents = entities(venv)
    return torch.stack([e.state.pos for e in ents], 1), torch.stack([e.state.vel for e in ents], 1)
