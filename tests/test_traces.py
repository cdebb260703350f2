"""Reading a recorded ring: GPU-shaped traces written from simulated timelines, with the kernel
names, fields and streams NCCL, flash-attn and cuDNN produce (``ringsim.views.gpu_trace``),
give back the run's configuration and every step exactly, in each format the reader takes
(Kineto JSON, gzipped, merged, Nsight SQLite), with ranks' clocks seconds apart, and the
comparison then finds nothing to explain."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringsim.timer import RingConfig, simulate
from ringsim.timer.machine.hardware import get_hardware
from ringsim.timer.studies.compare import compare_ring, predicted_parts
from ringsim.traces import FAMILIES, Event, classify, read_ring
from ringsim.traces.kinds import NCCL_P2P_KERNEL
from ringsim.views.gpu_trace import LAG_S, gpu_traces, write_gpu_traces, write_nsys_export

LEAD = 2 * LAG_S  # the host enters the ring's function this long before the device starts
FAMILY_OF = {"fa2": "flash-attn 2", "fa3": "flash-attn 3", "cudnn": "cuDNN SDPA"}
CASES = [  # (implementation, causal, layout)
    ("fa2", False, "contiguous"),
    ("cudnn", True, "contiguous"),
    ("fa3", True, "zigzag"),
    ("fa2", True, "striped"),
]


def run(hosts=4, block=4096, impl="fa2", causal=False, layout="contiguous", heads=16, kv=4):
    config = RingConfig(
        hosts=hosts,
        seq_len=hosts * block,
        hardware=get_hardware("h100-nvlink"),
        heads=heads,
        kv_heads=kv,
        head_dim=128,
        implementation=impl,
        causal=causal,
        layout=layout,
    )
    return config, simulate(config, keep_timeline=True)


def write(tmp_path, result, impl, **kw):
    return [str(p) for p in write_gpu_traces(result, tmp_path, family=FAMILY_OF[impl], **kw)]


def assert_recovered(recorded, config, result) -> None:
    """The configuration exactly, and every (step, host) of the simulated run."""
    values = recorded.shape.values
    expected = dict(
        hosts=config.hosts,
        block_tokens=config.block_tokens,
        heads=config.heads,
        kv_heads=config.kv_heads,
        head_dim=config.head_dim,
        batch=config.batch,
        dtype=config.dtype,
        pass_="forward",
        causal=config.causal,
    )
    assert {k: values[k] for k in expected} == expected
    if config.causal:
        assert values["layout"] == config.layout
    attention, busy, _ = predicted_parts(result)
    computed = busy > 0  # a step whose block is skipped may launch no kernel
    sim, got = result.timeline, recorded.timeline
    start = sim.compute_start[computed] + LEAD
    assert np.allclose(got.compute_start[computed], start, rtol=0, atol=1e-9)
    end = start + busy[computed]  # the device's part of the step (not the host's)
    assert np.allclose(got.compute_end[computed], end, rtol=0, atol=1e-9)
    assert np.allclose(recorded.attention, attention, rtol=0, atol=1e-9)
    assert np.allclose(recorded.busy, busy, rtol=0, atol=1e-9)
    moving = np.isfinite(sim.send_start)
    done = np.fmax(sim.send_end, sim.recv_end)[moving] + LEAD  # one grouped NCCL kernel
    assert np.allclose(got.recv_end[moving], done, rtol=0, atol=1e-9)
    assert np.isnan(got.recv_end[~moving]).all()


@pytest.mark.parametrize(("impl", "causal", "layout"), CASES)
def test_gpu_shaped_traces_give_back_the_run_and_its_steps(tmp_path, impl, causal, layout):
    config, result = run(impl=impl, causal=causal, layout=layout)
    recorded = read_ring(write(tmp_path, result, impl))
    assert recorded.members == list(range(config.hosts))
    assert recorded.shape.family is FAMILIES[FAMILY_OF[impl]]
    assert recorded.device_name == "NVIDIA H100 80GB HBM3"
    assert_recovered(recorded, config, result)


@given(
    hosts=st.integers(2, 6),
    block=st.sampled_from([1024, 2048, 8192]),
    case=st.sampled_from(CASES),
    heads=st.sampled_from([(8, 8), (32, 8), (16, 2)]),
)
def test_any_ring_size_block_and_heads_is_recovered(tmp_path_factory, hosts, block, case, heads):
    impl, causal, layout = case
    config, result = run(hosts, block, impl, causal, layout, *heads)
    recorded = read_ring(write(tmp_path_factory.mktemp("t"), result, impl))
    assert_recovered(recorded, config, result)


def test_gzipped_merged_and_nsys_files_read_alike(tmp_path):
    _, result = run(impl="fa3", causal=True, layout="zigzag")
    docs = gpu_traces(result, family="flash-attn 3")
    plain = read_ring(write(tmp_path / "plain", result, "fa3"))
    gz = read_ring(write(tmp_path / "gz", result, "fa3", gz=True))
    merged_path = tmp_path / "merged.json"
    merged = {"traceEvents": [e for doc in docs for e in doc["traceEvents"]]}
    merged_path.write_text(json.dumps(merged))
    nsys = read_ring([str(write_nsys_export(docs, tmp_path / "run.sqlite"))])
    for other in (gz, read_ring([str(merged_path)]), nsys):
        assert other.shape.values == plain.shape.values
        for name in ("compute_start", "compute_end", "recv_end"):
            a, b = getattr(plain.timeline, name), getattr(other.timeline, name)
            assert np.allclose(a, b, rtol=0, atol=2e-9, equal_nan=True), name
        assert np.allclose(other.attention, plain.attention, atol=2e-9)
    assert "ranks in file order" in " ".join(nsys.notes)  # nsys names no peers


def test_clocks_seconds_apart_are_aligned_on_the_messages(tmp_path):
    _, result = run(causal=True, layout="zigzag")
    same = read_ring(write(tmp_path / "same", result, "fa2"))
    offsets = [0.0, 3.0, -2.5, 7.25]
    apart = read_ring(write(tmp_path / "apart", result, "fa2", clock_offsets_s=offsets))
    assert not same.alignment.shifted and apart.alignment.shifted
    assert np.allclose(apart.alignment.offsets, [-o for o in offsets], atol=1e-6)
    for name in ("compute_start", "compute_end", "recv_start", "recv_end"):
        a, b = getattr(same.timeline, name), getattr(apart.timeline, name)
        assert np.allclose(a, b, rtol=0, atol=1e-6, equal_nan=True), name
    assert same.pass_times == pytest.approx(apart.pass_times, abs=1e-9)


# Rings whose hosts all finish their sends when they finish their receives: there a grouped
# NCCL send/recv kernel (which ends with both) and the timer (which lets a host go on once
# its receive is done) agree, and the run is exactly its own prediction.
SYMMETRIC = [("fa2", False, "contiguous"), ("cudnn", False, "contiguous"), ("fa2", True, "striped")]


@pytest.mark.parametrize(("impl", "causal", "layout"), SYMMETRIC)
def test_a_run_that_is_its_own_prediction_is_expected_step_by_step(tmp_path, impl, causal, layout):
    config, result = run(impl=impl, causal=causal, layout=layout)
    data = compare_ring(read_ring(write(tmp_path, result, impl)), config).to_json()
    assert data["verdict"] == "expected"
    assert data["measured_s"] == pytest.approx(result.makespan + LEAD + LAG_S, abs=1e-9)
    assert data["predicted_s"] == pytest.approx(result.makespan, rel=1e-12)
    assert len(data["steps"]) == config.hosts
    for step in data["steps"][1:]:  # step 0 holds the host's lead into the ring's function
        for key in ("duration_s", "attention_s", "merge_s", "exposed_transfer_s", "idle_s"):
            assert step["measured"][key] == pytest.approx(step["predicted"][key], abs=1e-9)
    for term in ("attention", "merge", "exposed_transfer", "stragglers"):
        assert abs(data["terms"][term]["difference_s"]) <= 1e-9, term
    low, high = data["predicted_interval_s"]
    assert low <= data["predicted_s"] <= high


@pytest.mark.parametrize(("impl", "causal", "layout"), CASES)
def test_any_layout_compared_with_its_own_prediction_is_expected(tmp_path, impl, causal, layout):
    """Where hosts' sends and receives end apart (causal contiguous, zigzag), the grouped
    kernel holds a host until its send is done too: the measured run is a little longer
    than the timer's, never shorter, and still expected."""
    config, result = run(impl=impl, causal=causal, layout=layout)
    data = compare_ring(read_ring(write(tmp_path, result, impl)), config).to_json()
    assert data["verdict"] == "expected"
    assert data["predicted_s"] <= data["measured_s"] <= 1.05 * data["predicted_s"] + LEAD + LAG_S
    measured = [s["measured"]["attention_s"] for s in data["steps"]]
    assert all(a > 0 for a in measured)  # every step's slowest host computes
    for key in ("hosts", "steps", "measured_s", "predicted_s", "predicted_interval_s", "verdict"):
        assert key in data


def test_every_family_names_its_own_example_kernel():
    for family in FAMILIES.values():
        event = Event(family.example, 0.0, 1.0, "stream 7", device=family.device is not False)
        role = classify(event)
        assert role.kind == "attention" and role.family is family and role.pass_ == "forward"
    for name in (NCCL_P2P_KERNEL, "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)"):
        assert classify(Event(name, 0, 1, "stream 20", device=True)).transfer.direction == (
            "sendrecv"
        )
    gather = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    assert classify(Event(gather, 0, 1, "stream 20", device=True)).kind == "collective"


def test_a_gzipped_trace_reads_as_its_json(tmp_path):
    _, result = run(hosts=2)
    (doc,) = gpu_traces(result)[:1]
    path = tmp_path / "r.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    other = tmp_path / "r1.json"
    other.write_text(json.dumps(gpu_traces(result)[1]))
    recorded = read_ring([str(path), str(other)])
    assert recorded.hosts == 2 and recorded.shape.values["block_tokens"] == 4096


def test_a_ring_in_a_sub_group_reads_in_its_group_ranks(tmp_path):
    """A context-parallel ring inside a bigger job: the files name the job's ranks (4-7),
    the sends name ranks of the ring's own group (0-3), and the ring is read in the latter."""
    _, result = run()
    docs = gpu_traces(result)
    for doc in docs:
        doc["distributedInfo"]["rank"] += 4
        doc["distributedInfo"]["world_size"] = 8
    paths = []
    for r, doc in enumerate(docs):
        path = tmp_path / f"rank{r + 4}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    recorded = read_ring(paths)
    assert recorded.members == [0, 1, 2, 3] and recorded.hosts == 4
