"""forbid_host_syncs: what would make the host wait for a GPU raises, naming the operation."""
import pytest
import torch

from torchrl_warp.host_syncs import HostSyncError, forbid_host_syncs

x = torch.arange(4.0)
WAITS = {
    "Tensor.__bool__": lambda: bool(x.any()),
    "Tensor.item": lambda: x.sum().item(),
    "Tensor.tolist": lambda: x.tolist(),
    "Tensor.__float__": lambda: float(x[0]),
    "Tensor.cpu": lambda: x.cpu(),
    "torch.nonzero": lambda: torch.nonzero(x),
    "Tensor.unique": lambda: x.unique(),
    "Tensor.repeat_interleave": lambda: x.repeat_interleave(torch.tensor([1, 2, 1, 0])),
    "Tensor.__getitem__": lambda: x[x > 1],
    "Tensor.__setitem__": lambda: x.clone().__setitem__(x > 1, 0.0),
}


@pytest.mark.parametrize("name", WAITS)
def test_what_waits_for_the_host_is_named(name):
    with pytest.raises(HostSyncError, match=f"^{name.replace('.', '[.]')} makes the host wait"):
        with forbid_host_syncs():
            WAITS[name]()


def test_what_stays_on_the_device_runs():
    with forbid_host_syncs():
        y = torch.where(x > 1, x, 0.0).cumsum(0)
        y = y[torch.tensor([0, 2])] + x[1:].sum() + x.repeat_interleave(2, output_size=8)[:2].sum()
        x.clone()[torch.tensor([0])] = 1.0
    assert y.tolist() == [6.0, 8.0]


def test_a_flag_kept_on_the_host_may_be_read():
    flag = torch.tensor(True)
    flag.read_on_host = True
    with forbid_host_syncs():
        assert bool(flag)


def test_inside_it_code_sees_a_capture_and_after_it_not():
    import torchrl._utils
    from torchrl.modules.distributions import continuous

    with forbid_host_syncs():
        assert torch.cuda.is_current_stream_capturing() and continuous.safe_is_current_stream_capturing()
    assert continuous.safe_is_current_stream_capturing is torchrl._utils.safe_is_current_stream_capturing
    assert not continuous.safe_is_current_stream_capturing()
