"""A vendor's fused backward kernels (issue 23, scope 2): a plugin registers `<op>_vjp` like any kernel, the autograd
engine prefers it to the op's vjp rule on that device and uses its result, in eager and in to_static graphs; a
kernel that breaks the contract (one gradient per input, of its shape and dtype) is an error naming it. Test plugins:
tests/plugins/vjp_site (the CPU plugin plus relu_vjp and mul_vjp: vjpgood right, vjpbad wrong)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import hwadapter as hw
from hwadapter.api import meta
from hwadapter.api.interfaces import KernelRegistrar, KernelTable
from hwadapter.runtime.device import is_op

SITE = Path(__file__).parent / "plugins" / "vjp_site"  # not on sys.path: only these tests see vjpgood and vjpbad


@pytest.fixture
def vjpdev(monkeypatch, reset_plugins):
    """The test plugins' module (its CALLS counter cleared), with vjpgood:0 and vjpbad:0 available."""
    monkeypatch.syspath_prepend(str(SITE))
    reset_plugins()
    import hwadapter_vjpdev
    hwadapter_vjpdev.CALLS.clear()
    yield hwadapter_vjpdev
    monkeypatch.undo()  # off sys.path before the rescan (reset_plugins' teardown)


def leaf(values, device):
    t = hw.to_tensor(np.asarray(values, "float32"), device=device)
    t.stop_gradient = False
    return t


def test_a_registered_relu_vjp_is_preferred_and_its_result_used(vjpdev):
    x = leaf([-1.0, 2.0, 0.5], "vjpgood:0")
    (hw.relu(x) * 3.0).sum().backward()
    assert vjpdev.CALLS["relu_vjp"] == 1
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 3.0, 3.0])
    bad = leaf([-1.0, 2.0, 0.5], "vjpbad:0")  # its relu_vjp forgets the mask: the gradient shows it ran
    hw.relu(bad).sum().backward()
    np.testing.assert_array_equal(bad.grad.numpy(), [1.0, 1.0, 1.0])
    cpu = leaf([-1.0, 2.0, 0.5], "cpu:0")  # the rule elsewhere
    (hw.relu(cpu) * 3.0).sum().backward()
    np.testing.assert_array_equal(cpu.grad.numpy(), [0.0, 3.0, 3.0])
    assert vjpdev.CALLS["relu_vjp"] == 1


def test_a_fused_kernel_of_two_inputs_with_broadcasting(vjpdev):
    rng = np.random.default_rng(0)
    a0, b0 = rng.standard_normal((2, 3)).astype("float32"), rng.standard_normal((3,)).astype("float32")
    a, b = leaf(a0, "vjpgood:0"), leaf(b0, "vjpgood:0")
    ga, gb = hw.grad((a * b).sum(), [a, b])
    assert vjpdev.CALLS["mul_vjp"] == 1
    np.testing.assert_allclose(ga.numpy(), np.broadcast_to(b0, (2, 3)), rtol=1e-6)
    np.testing.assert_allclose(gb.numpy(), a0.sum(0), rtol=1e-6)
    c = leaf(a0, "vjpgood:0")  # only one input needs a gradient: the kernel's other gradient is dropped
    (gc,) = hw.grad((c * hw.to_tensor(b0, device="vjpgood:0")).sum(), c)
    np.testing.assert_allclose(gc.numpy(), np.broadcast_to(b0, (2, 3)), rtol=1e-6)


def test_a_fused_kernel_returning_the_wrong_shape_is_an_error_naming_it(vjpdev):
    a, b = leaf(np.ones((2, 3)), "vjpbad:0"), leaf(np.ones(3), "vjpbad:0")
    with pytest.raises(hw.KernelExecutionError, match=r"'mul_vjp' on vjpbad:0.*float32\[2, 3\], float32\[2, 3\].*"
                                                      r"one gradient per input of 'mul'.*float32\[3\].*"
                                                      r"HWADAPTER_DISABLE_PLUGINS=vjpbad"):
        (a * b).sum().backward()


def test_second_derivatives_use_the_rules(vjpdev):
    """A fused kernel's result carries no tape; with create_graph the rule's (recorded) gradient is what flows."""
    x = leaf([0.5, 2.0], "vjpgood:0")
    (g,) = hw.grad((x * x * x).sum(), x, create_graph=True)
    (gg,) = hw.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), 6 * x.numpy(), rtol=1e-6)


def test_a_to_static_train_step_records_and_runs_the_fused_kernel(vjpdev):
    dev = "vjpgood:0"
    w0 = np.array([1.0, -1.0, 0.5], "float32")
    x = hw.to_tensor(np.array([1.0, 2.0, -3.0], "float32"), device=dev)

    def make():
        return hw.create_parameter([3], initializer=w0, device=dev)

    def step(w, x):
        loss = hw.relu(x * w).sum()
        loss.backward()
        with hw.no_grad():
            w.set_value(w - 0.1 * w.grad)
            w.clear_grad()
        return loss
    we, ws = make(), make()
    static = hw.jit.to_static(lambda t: step(ws, t))
    for _ in range(3):
        assert float(step(we, x)) == float(static(x))
    np.testing.assert_array_equal(ws.numpy(), we.numpy())
    ops = [n.op for n in static.get_graph(x).nodes]
    assert "relu_vjp" in ops and "mul_vjp" in ops, ops
    before = vjpdev.CALLS["relu_vjp"]
    static(x)  # the plan runs the plugin's kernel
    assert vjpdev.CALLS["relu_vjp"] == before + 1


def test_the_registrar_takes_vjp_kernels_of_ops_of_the_set_only():
    assert is_op("relu_vjp") and is_op("conv2d_vjp") and is_op("relu")
    assert not is_op("nosuchop_vjp") and not is_op("relu_vjp_vjp") and not is_op("_vjp")
    registrar = KernelRegistrar(KernelTable(), SimpleNamespace(type="acme"), is_op)
    registrar.register("matmul_vjp", lambda x, y, g: [g, g], dtypes=["float32"])
    with pytest.raises(hw.PluginLoadError, match=r"'nosuchop_vjp', which is not an op of hwadapter"):
        registrar.register("nosuchop_vjp", lambda x, g: g)


def test_the_shape_rule_of_a_vjp_op_gives_the_inputs_shapes_and_dtypes():
    f32, i64 = np.dtype("float32"), np.dtype("int64")
    assert meta.result_meta("mul_vjp", [(2, 3), (3,), (2, 3)], [f32] * 3) == (((2, 3), f32), ((3,), f32))
    assert meta.result_meta("relu_vjp", [(4,), (4,)], [f32, f32]) == (((4,), f32),)
    assert meta.result_meta("gather_vjp", [(3, 4), (2,), (3, 2)], [f32, i64, f32], {"axis": 1}) == \
        (((3, 4), f32), ((2,), i64))
    # split: one input, two outputs (two gradients)
    assert meta.result_meta("split_vjp", [(5, 2), (2, 2), (3, 2)], [f32] * 3, {"sections": (2, 3), "axis": 0}) == \
        (((5, 2), f32),)
    with pytest.raises(hw.InvalidArgumentError, match=r"mul_vjp: inputs .* are not mul's inputs followed by the "
                                                      r"gradients of its outputs"):
        meta.result_meta("mul_vjp", [(2, 3), (3,), (5,)], [f32] * 3)
    assert meta.result_meta("nosuch", [(1,)], [f32]) is None


def test_op_vjp_gives_the_rules_gradient_of_one_op():
    """hw.autograd.op_vjp: what a fused backward kernel must return, by the rule (the conformance kit's reference)."""
    a0, b0, g0 = np.array([[1.0, -2.0, 3.0]]), np.array([0.5, 4.0, -1.0]), np.array([[2.0, 1.0, -1.0]])
    ga, gb = hw.autograd.op_vjp("mul", [hw.to_tensor(a0), hw.to_tensor(b0)], hw.to_tensor(g0))
    np.testing.assert_array_equal(ga.numpy(), g0 * b0)
    np.testing.assert_array_equal(gb.numpy(), (g0 * a0)[0])
    x = hw.to_tensor(np.arange(6.0).reshape(2, 3))
    gx, gi = hw.autograd.op_vjp("gather", [x, hw.to_tensor(np.array([2, 2, 0]))], hw.to_tensor(np.ones((2, 3))),
                                {"axis": 1})
    assert gi is None
    np.testing.assert_array_equal(gx.numpy(), [[1.0, 0.0, 2.0], [1.0, 0.0, 2.0]])
    with pytest.raises(hw.InvalidArgumentError, match=r"op 'argmax' has no vjp rule"):
        hw.autograd.op_vjp("argmax", [x], None)
    with pytest.raises(hw.InvalidArgumentError, match=r"output 0 of 'mul' must be a tensor of shape \[1, 3\]"):
        hw.autograd.op_vjp("mul", [hw.to_tensor(a0), hw.to_tensor(b0)], hw.to_tensor(np.ones(2)))
