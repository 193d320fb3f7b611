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


def test_an_optimizer_that_is_not_capturable_steps_inside_it(monkeypatch):
    """torch's optimizers refuse to step under a capture unless built ``capturable``; the
    context says a capture is on, but a fused Adam's eager step waits for nothing, so it steps
    (on a GPU the refusal failed every replay family's check). Here torch is told that a CUDA
    capture is on, as on a GPU under a capture, for the optimizer's check to ask."""
    class Capturing:
        def is_capturing(self):
            return True

    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.Adam([weight], lr=0.1, fused=True)
    (weight * 2).sum().backward()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # torch < 2.12 asks these two
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    if hasattr(torch, "accelerator"):  # torch >= 2.12 asks these
        monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda check_available=False: torch.device("cuda"))
        monkeypatch.setattr(torch.accelerator, "current_stream", lambda device=None: Capturing())
    with pytest.raises(RuntimeError, match="capturable is False"):  # what a capture gets
        optimizer.step()
    with forbid_host_syncs():
        optimizer.step()
    assert weight.detach().lt(1).all()


#: copies of host memory to the device, as a CPU run (standing in for a GPU) sees them
COPIES = {
    "torch.tensor": lambda: torch.tensor(0.0, dtype=x.dtype, device=x.device),  # tensordict's where(pad=0)
    "torch.as_tensor": lambda: torch.as_tensor([1.0, 2.0], device="cpu"),
    "torch.asarray": lambda: torch.asarray([1.0], device=x.device),
    "Tensor.new_tensor": lambda: x.new_tensor([1.0]),
}


@pytest.mark.parametrize("name", COPIES)
def test_a_copy_of_host_memory_to_the_device_is_named(name):
    with pytest.raises(HostSyncError, match=f"^{name.replace('.', '[.]')} cannot be captured in a CUDA graph "
                                            r"\(copies host memory to the device"):
        with forbid_host_syncs():
            COPIES[name]()


def test_host_tensors_made_without_a_device_and_device_tensors_are_not_copies():
    with forbid_host_syncs():
        y = x + torch.tensor(1.0)  # a host scalar: read into the kernel's arguments, no copy
        y = torch.as_tensor(y) + torch.zeros_like(x) + torch.full((4,), 2.0, device=x.device)
    assert y.tolist() == [3.0, 4.0, 5.0, 6.0]


def test_on_a_gpu_a_host_tensor_with_the_cpu_named_is_no_copy():
    """forbid_host_syncs("cuda"): only what is built on a CUDA device is a copy (this runs on the
    CPU: the check is on the arguments)."""
    with forbid_host_syncs("cuda"):
        torch.tensor([1.0], device="cpu")
    with pytest.raises(HostSyncError, match="copies host memory"):
        with forbid_host_syncs("cuda"):
            torch.tensor([1.0], device=torch.device("cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["to", "copy_", "index"])
def test_on_a_gpu_cpu_tensors_moved_to_it_are_named(case):
    g, h = torch.zeros(3, device="cuda"), torch.arange(3)
    run = {"to": lambda: h.to("cuda"), "copy_": lambda: g.copy_(h), "index": lambda: g[h]}[case]
    with pytest.raises(HostSyncError, match="copies host memory"):
        with forbid_host_syncs("cuda"):
            run()
