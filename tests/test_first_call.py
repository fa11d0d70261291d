"""Mistakes caught at a solve's first call of the user's functions (docs/tutorial.md,
section 9): arguments written in place, lower precision, a control's wrong ``jac``,
wrong arguments, per-sample functions declared vectorised; and the other silent cases
made loud (non-finite InImNet inputs, a `client` that is not a Dask client, an ``--out``
that cannot be created, ``n_controls``, NaN bounds)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import sympy as sp

import invimbed

X = np.array([1.0])


def _quadratic(dynamics, **kw):
    return invimbed.BolzaProblem(dynamics, lambda t, z, th: 0.5 * (z @ z + th @ th),
                                 lambda z: 0.5 * z @ z, **kw)


def _scale_in_place(t, z, th):
    z *= 0.5
    return -z + th[0]


def _assign_theta(t, z, th):
    th[0] = 2.0
    return -z + th[0]


@pytest.mark.parametrize("solve", ["adjoint", "imbedding", "ensemble_numba"])
def test_dynamics_writing_into_z_is_refused_by_every_solver(solve):
    problem = _quadratic(_scale_in_place)
    ctrl = invimbed.Constant([0.3])
    with pytest.raises(ValueError, match=r"`dynamics` modified its argument `z` in place "
                                         r"\(z\[0\] was 1\.0 and became 0\.5"):
        if solve == "imbedding":
            invimbed.solve_imbedding(problem, X, [-1.0], control=ctrl)
        elif solve == "adjoint":
            invimbed.solve_adjoint(problem, X, [-1.0], control=ctrl)
        else:
            pytest.importorskip("numba")
            invimbed.solve_adjoint(problem, X, [-1.0], control=ctrl, backend="numba")


def test_writing_into_theta_and_in_the_terminal_loss_is_refused():
    with pytest.raises(ValueError, match=r"`dynamics` modified its argument `theta`"):
        invimbed.solve_adjoint(_quadratic(_assign_theta), X, [-1.0],
                               control=invimbed.Constant([0.3]))

    def terminal(z):
        z[0] = 0.0
        return 0.5 * z @ z
    problem = invimbed.BolzaProblem(lambda t, z, th: -z, terminal_loss=terminal)
    with pytest.raises(ValueError, match=r"`terminal_loss` modified its argument `z`"):
        invimbed.solve_adjoint(problem, X, [-1.0])


def test_a_copy_first_is_not_a_mutation():
    def dynamics(t, z, th):
        z = z.copy()
        z[0] *= 0.5
        return -z
    problem = invimbed.BolzaProblem(dynamics, terminal_loss=lambda z: 0.5 * z @ z)
    res = invimbed.solve_adjoint(problem, X, [-1.0], rtol=1e-10, atol=1e-12)
    assert res.success
    # dz/dt = -z/2 from x = 1 over [-1, 0]: z = exp(-1/2), value z^2 / 2
    assert res.z[0, 0] == pytest.approx(np.exp(-0.5), rel=1e-8)


def test_the_test_points_are_formatted_only_for_a_refusal(monkeypatch):
    """The seeded test points of `probe.writes_at_test_points` name themselves in the
    refusal's message only (formatting them for every function that writes nothing cost
    ~0.5 ms each at every new problem's first solve)."""
    from invimbed._core.inputs import probe

    def no_format(a):
        raise AssertionError("a test point formatted though nothing was written")

    monkeypatch.setattr(probe, "_fmt", no_format)
    z, th = np.array([[0.4, -0.2]]), np.array([[0.3]])
    probe.writes_at_test_points(lambda t, z, th: -z + th, "dynamics", "f", 0.0, z, th)
    monkeypatch.undo()

    def writes(t, z, th):
        z[:, 1] = 0.9 * z[:, 1]
        return -z
    with pytest.raises(ValueError, match=r"`dynamics` modified its argument `z` in place "
                                         r"\(z\[0, 1\] was .* at the test point t = 0, z = "):
        probe.writes_at_test_points(writes, "dynamics", "f", 0.0, z, th)


def _float32_problem():
    return invimbed.BolzaProblem(lambda t, z, th: (-z).astype(np.float32),
                                 terminal_loss=lambda z: 0.5 * z @ z)


def test_float32_dynamics_are_reported_and_a_finer_rtol_is_not_a_success():
    loose = invimbed.solve_adjoint(_float32_problem(), X, [-1.0], rtol=1e-5, atol=1e-8)
    assert loose.success and loose.status == 0
    assert [w.code for w in loose.warnings] == ["low_precision"]
    assert "float32" in loose.warnings[0].message and "float32" not in loose.message
    assert loose.z[0, 0] == pytest.approx(np.exp(-1.0), rel=1e-4)

    fine = invimbed.solve_imbedding(_float32_problem(), X, [-0.2], rtol=1e-10, atol=1e-12,
                                    estimate_error=False)
    assert not fine.success and fine.status == invimbed.Status.IMPRECISE == -5
    assert "rtol = 1e-10 is below 1.2e-06" in fine.message
    assert "low_precision" in [w.code for w in fine.warnings]


def test_float64_results_carry_no_precision_warning():
    problem = invimbed.BolzaProblem(lambda t, z, th: -z, terminal_loss=lambda z: 0.5 * z @ z)
    res = invimbed.solve_adjoint(problem, X, [-1.0], rtol=1e-10, atol=1e-12)
    assert res.success and res.warnings == []


def _line(t, w):
    return np.array([w[0] + w[1] * t])


@pytest.mark.parametrize("jac", [lambda t, w: np.array([[1.0, -t]]),        # sign slip
                                 lambda t, w: np.array([[t, 1.0]]),         # swapped
                                 lambda t, w: np.array([[1.0, 1.01 * t]])])  # 1% off
def test_a_control_jac_that_disagrees_with_its_fn_is_refused(jac):
    control = invimbed.Control(_line, [0.3, 0.2], jac=jac)
    problem = _quadratic(lambda t, z, th: -z + th[0])
    with pytest.raises(ValueError, match=r"control `jac\(t, w\)` does not match finite "
                                         r"differences of `fn\(t, w\)`"):
        invimbed.solve_adjoint(problem, X, [-1.0], control=control)


def test_a_right_control_jac_gives_the_gradient_of_finite_differences():
    control = invimbed.Control(_line, [0.3, 0.2], jac=lambda t, w: np.array([[1.0, t]]))
    problem = _quadratic(lambda t, z, th: -z + th[0])
    res = invimbed.solve_adjoint(problem, X, [-1.0], control=control, rtol=1e-11, atol=1e-13)
    assert res.success

    def value(w):
        c = invimbed.Control(_line, w)
        return invimbed.solve_adjoint(problem, X, [-1.0], control=c, rtol=1e-11,
                                      atol=1e-13).value[0]
    h = 1e-5
    fd = [(value(np.add([0.3, 0.2], h * e)) - value(np.add([0.3, 0.2], -h * e))) / (2 * h)
          for e in np.eye(2)]
    np.testing.assert_allclose(res.param_grad[0], fd, rtol=1e-6)
    # checked once: the controls of with_params share the verdict
    assert control._jac_checked and control.with_params([0.1, 0.1])._jac_checked


def test_terminal_loss_given_as_running_loss_is_named():
    problem = invimbed.BolzaProblem(lambda t, z, th: -z, lambda z: 0.5 * z @ z)
    with pytest.raises(TypeError, match=r"`running_loss` must take the arguments \(t, z, "
                                        r"theta\).*pass it as `terminal_loss=`"):
        invimbed.solve_adjoint(problem, X, [-1.0])


def test_dynamics_with_one_argument_are_named():
    problem = invimbed.BolzaProblem(lambda z: -z, terminal_loss=lambda z: 0.5 * z @ z)
    with pytest.raises(TypeError, match=r"`dynamics` must take the arguments \(t, z, theta\), "
                                        r"but it takes 1"):
        invimbed.solve_adjoint(problem, X, [-1.0])


def test_a_type_error_inside_the_function_is_passed_on():
    def dynamics(t, z, th):
        return -z + "1"
    problem = invimbed.BolzaProblem(dynamics, terminal_loss=lambda z: 0.5 * z @ z)
    with pytest.raises(TypeError) as info:
        invimbed.solve_adjoint(problem, X, [-1.0])
    assert "must take the arguments" not in str(info.value)


def test_a_per_sample_function_declared_vectorized_names_vectorized():
    problem = invimbed.BolzaProblem(lambda t, z, th: np.array([-z[1], z[0]]),
                                    terminal_loss=lambda z: np.sum(z**2, axis=1),
                                    vectorized=True)
    with pytest.raises(ValueError, match=r"`dynamics` raised IndexError .* it is a "
                                         r"per-sample function.*`vectorized=True`"):
        invimbed.solve_adjoint(problem, np.array([1.0, 0.5]), [-1.0])


def test_n_controls_against_the_problems_controls_names_n_controls():
    t, z, u = sp.symbols("t z u")
    problem = invimbed.from_sympy(t, [z], [u], [-z + u], (z**2 + u**2) / 2, z**2 / 2)
    with pytest.raises(ValueError, match=r"`n_controls` must be 1, the problem's number of "
                                         r"controls \(symbols: u\), but got 2"):
        invimbed.solve_optimal(problem, X, [-1.0], n_controls=2)


def test_nan_control_bounds_say_nan():
    t, z, u = sp.symbols("t z u")
    problem = invimbed.from_sympy(t, [z], [u], [-z + u], (z**2 + u**2) / 2, z**2 / 2)
    with pytest.raises(ValueError, match=r"`control_bounds` must not contain NaN"):
        invimbed.solve_optimal(problem, X, [-1.0], control_bounds=[(np.nan, 1.0)])


def test_a_client_that_is_not_a_dask_client_is_refused():
    pytest.importorskip("dask")
    import invimbed.dask as idask
    problem = _quadratic(lambda t, z, th: -z + th[0], vectorized=False)
    with pytest.raises(TypeError, match=r"`client` must be a dask.distributed Client .* but "
                                        r"got .tcp.*type str.*distributed.Client\(.tcp://"):
        idask.solve_batch(problem, np.ones((4, 1)), [-1.0], control=invimbed.Constant([0.3]),
                          client="tcp://127.0.0.1:8786")


def test_non_finite_inimnet_inputs_name_the_rows():
    torch = pytest.importorskip("torch")
    from invimbed.nn import InImNet
    net = InImNet(2, p_min=-2)
    x = torch.tensor([[1.0, 2.0], [float("nan"), 0.0], [0.0, float("inf")]])
    with pytest.raises(ValueError, match=r"2 of its 3 rows hold a NaN or an infinity "
                                         r"\(row\(s\) 1, 2\)"):
        net(x)
    assert torch.isfinite(net(x[:1])).all()


def test_an_out_folder_that_cannot_be_created_is_a_one_line_error(tmp_path):
    pytest.importorskip("torch")
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = blocker / "sub"                      # a folder under a file: cannot be created
    proc = subprocess.run([sys.executable, "-m", "invimbed.experiments", "rotating-mnist",
                           "--quick", "--out", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "must be a folder that can be created" in proc.stderr and "file" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].count("error:") == 1


def test_an_out_folder_the_system_refuses_is_a_one_line_error(capsys):
    # in this process, through the command's `main`: the file system refuses the folder
    # only when the runner creates it, after the dependencies (PyTorch) are loaded, which
    # a fresh interpreter pays seconds for. An exception other than argparse's exit
    # (status 2) fails the test; the exit status and the one-line message of the process
    # itself are those of test_an_out_folder_that_cannot_be_created_is_a_one_line_error.
    pytest.importorskip("torch")
    from pathlib import Path

    from invimbed.experiments.__main__ import main
    if not Path("/proc/self").is_dir():
        pytest.skip("needs /proc, where no folder can be created")
    with pytest.raises(SystemExit) as exc:
        main(["rotating-mnist", "--quick", "--no-figures", "--out", "/proc/invimbed-out"])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err[-500:]
    assert "Traceback" not in err
    assert "(--out) must be a folder that can be created" in err
    assert err.strip().splitlines()[-1].count("error:") == 1
