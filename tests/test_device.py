"""A device is an object that is asked (issue 32): what it is (chip, link kind, achieved
point-to-point bandwidth) is a field of its ``Hardware``, never read from its name, so a renamed
or modified preset predicts the same; a new GPU is one entry or one JSON file; a kernel family
runs where it has a curve for the chip, and fp8 is allowed or refused in one place."""

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringsim import cli
from ringsim.timer import RingConfig, simulate
from ringsim.timer.machine.arch import ARCHS, BLACKWELL, CPU, HOPPER, Arch, device_arch
from ringsim.timer.machine.families import KERNELS, get_family, split_count
from ringsim.timer.machine.hardware import (
    PRESETS,
    custom_hardware,
    get_hardware,
    load_profile,
    save_profile,
)
from ringsim.timer.machine.kernel_model import kind_rate
from ringsim.timer.machine.links import INFINIBAND, PCIE
from ringsim.timer.step.gemm import check_gemm_dtype

ZIGZAG = ("--hosts", "8", "--seq-len", "64K", "--causal", "--layout", "zigzag")


def cli_json(capsys, *argv) -> dict:
    assert cli.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def cli_error(capsys, *argv) -> str:
    assert cli.main(list(argv)) == 2
    return capsys.readouterr().err


# -- the two predictions the name used to change ---------------------------------------------
def test_memory_bytes_on_h200_ib_keeps_the_infiniband_link(capsys):
    """``--memory-bytes`` renamed the preset ``h200-ib (modified)``: the ``-ib`` suffix test
    failed and the InfiniBand link became NVLink (22.98 -> 25.78 ms before the fix)."""
    own = get_hardware("h200-ib").memory_bytes
    args = (*ZIGZAG, "--hardware", "h200-ib", "--implementation", "fa2")
    plain = cli_json(capsys, "simulate", *args)
    modified = cli_json(capsys, "simulate", *args, "--memory-bytes", f"{own:.0f}")
    assert modified["total_time_s"] == plain["total_time_s"]
    assert modified["exposed_comm_s"] == plain["exposed_comm_s"]
    assert plain["total_time_s"] == pytest.approx(22.98e-3, rel=0.01)  # the number


def test_memory_bytes_on_h100_keeps_the_achieved_p2p_range(capsys):
    """The achieved-bandwidth table was keyed by the exact name (15.70 -> 15.54 ms)."""
    args = (*ZIGZAG, "--hardware", "h100-nvlink", "--implementation", "fa2")
    plain = cli_json(capsys, "simulate", *args)
    modified = cli_json(capsys, "simulate", *args, "--memory-bytes", "80G")
    assert modified["total_time_s"] == plain["total_time_s"]
    assert plain["total_time_s"] == pytest.approx(15.70e-3, rel=0.01)


@pytest.mark.parametrize("name", ["a100-nvlink", "h100-nvlink", "h200-ib", "h800-nvlink"])
def test_a_renamed_preset_predicts_the_same(name):
    hw = get_hardware(name)
    base = dict(hosts=4, seq_len=16384, causal=True, layout="zigzag", implementation="fa2")
    renamed = dataclasses.replace(hw, name=f"my {name}, modified", memory_bytes=1e9)
    for pass_ in ("forward", "backward"):
        a = simulate(RingConfig(hardware=hw, pass_=pass_, **base)).summary()
        b = simulate(RingConfig(hardware=renamed, pass_=pass_, **base)).summary()
        assert a["total_time_s"] == b["total_time_s"]
        assert a["min_block_for_overlap"] == b["min_block_for_overlap"]


def test_another_link_drops_the_achieved_range_and_moves_the_time():
    """``--bandwidth`` (``Hardware.with_link``): a range measured on the H100's own NVLink no
    longer applies; the hops run at NVLink's efficiency of the new line rate."""
    h100 = get_hardware("h100-nvlink")
    slow = h100.with_link(10e9)
    assert slow.p2p_bandwidth is None and slow.arch is HOPPER and slow.link is h100.link
    base = dict(hosts=4, seq_len=16384, implementation="fa2")
    fast = simulate(RingConfig(hardware=h100, **base)).summary()["total_time_s"]
    assert simulate(RingConfig(hardware=slow, **base)).summary()["total_time_s"] > 2 * fast


# -- a preset is data: one entry, or one file --------------------------------------------------
def test_every_preset_says_what_it_is_with_sources():
    for name, hw in PRESETS.items():
        assert hw.name == name and hw.source and hw.arch is not None and hw.arch.source
        assert hw.link.source
        if hw.arch.cuda:
            assert hw.arch.sms > 0 and hw.arch.name in ARCHS
    assert PRESETS["a100-ib"].link is PRESETS["h200-ib"].link is INFINIBAND


def test_b200_is_one_entry_with_its_sources():
    b200 = get_hardware("b200-nvlink")
    assert b200.arch is BLACKWELL and b200.arch.fp8 and b200.arch.sms == 148
    assert "DGX B200" in b200.source and "HGX B200" in b200.source
    assert b200.flops_for("bf16") == pytest.approx(2.25e15)
    ideal = simulate(RingConfig(hosts=8, seq_len=65536, hardware=b200)).summary()
    h100 = simulate(RingConfig(hosts=8, seq_len=65536, hardware=get_hardware("h100-nvlink")))
    assert ideal["compute_time_s"] == pytest.approx(
        h100.summary()["compute_time_s"] * 989e12 / 2.25e15
    )
    with pytest.raises(ValueError, match="no published curve for its architecture"):
        RingConfig(hosts=8, seq_len=65536, hardware=b200, implementation="fa2")


def h100_pcie_file(tmp_path) -> str:
    """A device no preset has, written by hand: an H100 PCIe (114 SMs, PCIe 5.0 x16)."""
    device = {
        "name": "h100-pcie",
        "arch": {"name": "hopper", "sms": 114, "compute_capability": [9, 0], "fp8": True},
        "flops": {"bf16": 756e12, "fp16": 756e12, "fp32": 51e12},
        "memory_bytes": 80e9,
        "memory_bandwidth": 2.0e12,
        "link": "pcie",
        "link_bandwidth": 63e9,
        "link_latency": 5e-6,
        "source": "H100 PCIe 80GB datasheet: 756 TFLOP/s dense bf16, 114 SMs, PCIe 5.0 x16",
    }
    path = tmp_path / "h100-pcie.json"
    path.write_text(json.dumps(device))
    return str(path)


def test_a_json_hardware_file_runs_fa2(tmp_path, capsys):
    path = h100_pcie_file(tmp_path)
    hw = load_profile(path)
    assert hw.arch.name == "hopper" and hw.arch.sms == 114 and hw.link is PCIE
    assert get_hardware(path) == hw
    cfg = RingConfig(hosts=8, seq_len=65536, hardware=hw, causal=True, layout="zigzag")
    real = simulate(cfg.replace(implementation="fa2")).summary()
    ideal = simulate(cfg).summary()
    assert real["total_time_s"] > ideal["total_time_s"]  # fa2 reaches below the peak
    on_sxm = cfg.replace(hardware=get_hardware("h100-nvlink"), implementation="fa2")
    assert real["compute_time_s"] > simulate(on_sxm).summary()["compute_time_s"]
    out = cli_json(capsys, "simulate", *ZIGZAG, "--hardware", path, "--implementation", "fa2")
    assert out["total_time_s"] == pytest.approx(real["total_time_s"])
    plan = cli_json(
        capsys,
        "plan",
        "--model",
        "7b",
        "--seq-len",
        "64K",
        "--hosts",
        "8",
        "--hardware",
        path,
        "--implementation",
        "fa2",
        "--top",
        "1",
    )
    assert plan["candidates"][0]["step_time_s"] > 0
    memory = cli_json(capsys, "memory", "--model", "7b", "--hosts", "8", "--hardware", path)
    assert memory["hardware"] == "h100-pcie"


def test_a_preset_saved_as_a_file_is_the_same_device(tmp_path):
    for name in ("h100-nvlink", "h200-ib", "tpu-v4", "b200-nvlink"):
        path = tmp_path / f"{name}.json"
        save_profile(get_hardware(name), path)
        assert load_profile(path) == get_hardware(name)


def test_a_profile_file_is_shown_with_its_device_and_date(tmp_path, capsys):
    profile = dataclasses.replace(
        custom_hardware(7.6e10, 2e9, 4e-4, dtype="fp32", arch="cpu"),
        name="gloo-calibrated",
        device="vm",
    )
    path = tmp_path / "cpu-profile.json"
    save_profile(profile, path)
    args = ("--hosts", "2", "--seq-len", "4K", "--hardware", str(path), "--implementation", "torch")
    assert cli.main(["simulate", *args, "--json"]) == 0
    err = capsys.readouterr().err
    assert "gloo-calibrated" in err and "on vm" in err and "saved 20" in err


@pytest.mark.parametrize(
    "text, word",
    [
        ('{"name": "x"}', "missing"),
        (
            '{"name": "x", "flops": {"bf16": 1e12}, "link_bandwidth": 1e9, "link_latency": 0, '
            '"memory_bytes": 1e9, "arch": "volta"}',
            "arch",
        ),
        (
            '{"name": "x", "flops": {"bf16": 1e12}, "link_bandwidth": 1e9, "link_latency": 0, '
            '"memory_bytes": 1e9, "link": "carrier-pigeon"}',
            "link",
        ),
        (
            '{"name": "x", "flops": {"bf16": 1e12}, "link_bandwidth": 1e9, "link_latency": 0, '
            '"memory_bytes": 1e9, "arch": {"name": "y", "sms": -1}}',
            "sms",
        ),
    ],
)
def test_a_bad_hardware_file_is_one_line_naming_it(tmp_path, capsys, text, word):
    path = tmp_path / "bad.json"
    path.write_text(text)
    err = cli_error(capsys, "simulate", "--hosts", "2", "--seq-len", "4K", "--hardware", str(path))
    assert err.count("\n") == 1 and word in err and "bad.json" in err


def test_an_unknown_name_that_is_no_file_says_both(capsys):
    err = cli_error(capsys, "simulate", "--hosts", "2", "--seq-len", "4K", "--hardware", "h900")
    assert "unknown hardware preset 'h900'" in err and "JSON file" in err


def test_a_cuda_device_is_its_capability_and_sm_count():
    assert device_arch((9, 0), 132) is HOPPER
    pcie = device_arch((9, 0), 114)
    assert pcie.name == "hopper" and pcie.sms == 114 and pcie.fp8
    new = device_arch((12, 0), 188)
    assert new.name == "sm_120" and new.fp8 and new.sms == 188
    assert not device_arch((8, 0), 108).fp8
    assert Arch("x", compute_capability=[8, 6]).compute_capability == (8, 6)


# -- families run where they have a curve --------------------------------------------------------
@pytest.mark.parametrize("hardware", ["h100-nvlink", "a100-ib", "tpu-v4", "b200-nvlink"])
def test_the_cpu_torch_block_is_refused_off_a_cpu_everywhere(hardware, capsys):
    hw = get_hardware(hardware)
    assert not KERNELS["torch"].runs_on(hw)
    with pytest.raises(ValueError, match="does not run on hardware"):
        RingConfig(hosts=2, seq_len=4096, hardware=hw, implementation="torch")
    err = cli_error(
        capsys,
        "simulate",
        "--hosts",
        "8",
        "--seq-len",
        "64K",
        "--hardware",
        hardware,
        "--implementation",
        "torch",
    )
    assert "--implementation torch does not run on hardware" in err


def test_plan_and_validate_refuse_torch_on_gpus(capsys):
    """``plan ... --cluster dgx-h100 --implementation torch`` exited 0 with an MFU of 112%."""
    err = cli_error(
        capsys,
        "plan",
        "--model",
        "7b",
        "--seq-len",
        "128K",
        "--cluster",
        "dgx-h100",
        "--hosts",
        "8",
        "--implementation",
        "torch",
    )
    assert err.count("\n") == 1 and "--implementation torch does not run" in err
    err = cli_error(capsys, "validate", "--experiment", "zhuzilin", "--implementation", "torch")
    assert err.count("\n") == 1 and "'torch' does not run on hardware" in err


def test_torch_runs_on_a_cpu_profile_and_gpu_families_do_not():
    cpu = get_hardware("cpu-calibrated")
    assert cpu.arch is CPU and KERNELS["torch"].runs_on(cpu)
    assert [n for n, f in KERNELS.items() if f.runs_on(cpu)] == ["ideal", "torch"]
    h100 = get_hardware("h100-nvlink")
    assert [n for n, f in KERNELS.items() if f.runs_on(h100)] == [
        "ideal",
        "fa2",
        "fa3",
        "cudnn",
        "triton",
    ]
    assert get_family("ideal").runs_on(custom_hardware(1e12, 1e9))


@pytest.mark.parametrize(
    "hardware, fp8",
    [("h100-nvlink", True), ("b200-nvlink", True), ("a100-nvlink", False), ("tpu-v4", False)],
)
def test_fp8_is_asked_of_the_chip_in_one_place(hardware, fp8):
    hw = get_hardware(hardware)
    if fp8:
        assert kind_rate(hw, "fp8") == 2 * hw.flops_for("bf16")
        assert check_gemm_dtype("fp8", hw) == "fp8"
        return
    for refuse in (lambda: kind_rate(hw, "fp8"), lambda: check_gemm_dtype("fp8", hw)):
        with pytest.raises(ValueError, match="fp8 tensor cores"):
            refuse()


# -- FA2's split heuristic ------------------------------------------------------------------------
def test_short_causal_calls_split_without_raising():
    """It took the best efficiency over every split count and then looked among the eligible
    ones only: StopIteration on short shapes (issue 29)."""
    for key_tiles in range(1, 64):
        for ctas in range(1, 212):
            n = split_count(ctas, 132, key_tiles)
            assert 1 <= n <= max(1, key_tiles)


@given(st.integers(1, 400), st.sampled_from([108, 114, 132, 148]), st.integers(1, 300))
def test_the_split_is_eligible_and_within_85_percent_of_the_best_eligible(ctas, sms, tiles):
    n = split_count(ctas, sms, tiles)
    slots = 2 * sms
    if ctas >= 0.8 * slots:
        assert n == 1
        return
    eligible = [
        k
        for k in range(1, min(128, slots, tiles) + 1)
        if k == 1 or -(-tiles // k) != -(-tiles // (k - 1))
    ]
    eff = {k: (ctas * k / slots) / -(-ctas * k // slots) for k in eligible}
    assert n in eligible and eff[n] >= 0.85 * max(eff.values())
    assert all(eff[k] < 0.85 * max(eff.values()) for k in eligible if k < n)


def test_the_default_kernel_is_asked_of_the_chip_not_the_name(tmp_path):
    """The kernel family a run gets when nothing names one is the chip's
    (``Arch.attention_kernels``), not a table keyed by a preset's name prefix: a renamed A100
    keeps FA2, a hand-written Hopper file (its arch giving only what differs) gets the
    Hopper's, and a chip none is sourced for runs the ideal model."""
    from ringsim.timer.step.frameworks import default_kernel, kernel_alternatives

    renamed = dataclasses.replace(get_hardware("a100-nvlink"), name="my-cluster-gpu")
    assert default_kernel(renamed) == "fa2" and kernel_alternatives(renamed) == ("fa2",)
    pcie = load_profile(h100_pcie_file(tmp_path))
    assert pcie.arch.sms == 114 and kernel_alternatives(pcie) == HOPPER.attention_kernels
    assert "the file gives sms=114" in pcie.arch.source
    assert default_kernel(get_hardware("b200-nvlink")) == "ideal"
    assert kernel_alternatives(get_hardware("tpu-v4")) == ("ideal",)
    assert device_arch((9, 0), 114).attention_kernels == ("fa2", "cudnn")


def test_the_sustained_clock_is_a_fact_of_the_device():
    """A step's sustained-clock range is a field of its ``Hardware`` (it was one H100 constant
    applied to every device): the H100 SXM's is sourced, a device without one takes it and
    says so, and a device's own moves the step's slow end."""
    from ringsim.timer.machine.ranges import Range
    from ringsim.timer.step.uncertainty import step_ranges, step_scale

    h100, a100 = get_hardware("h100-nvlink"), get_hardware("a100-nvlink")
    saturated = 708.5 / 841.9  # a GH100 at 700 W: MSMF over MAMF (bf16)
    assert h100.sustained_clock.low == pytest.approx(saturated) and a100.sustained_clock is None
    stand_in = step_ranges(a100)["sustained_clock"]
    assert stand_in.low == h100.sustained_clock.low and "a100-nvlink has no" in stand_in.source
    assert step_scale(h100, {"sustained_clock": "slow"}).clock == pytest.approx(saturated)
    own = dataclasses.replace(a100, sustained_clock=Range(0.9, 1.0, 1.0, "low", "a test"))
    assert step_scale(own, {"sustained_clock": "slow"}).clock == 0.9
    assert step_scale(own).clock == step_scale(own, {"sustained_clock": "fast"}).clock == 1.0
