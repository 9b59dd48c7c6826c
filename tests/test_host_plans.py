"""flashcourse.cuda.common.host_plans: the fast path's keys, plan cache and refusals, without a GPU.

The packed launches and pooled outputs themselves need a GPU: benchmarks/gpu_host_path.py
--check compares every fast-path call with the checked path bit for bit there (recorded
in benchmarks/results/h200_host_path.json). Here the cache logic runs with a stand-in
Plan, and the public calls on the simulator keep their checked path.
"""

import numpy as np
import pytest
from numba import cuda

from flashcourse.cuda import capture, decode
from flashcourse.cuda.common import host_plans
from flashcourse.cuda.common.packed_launch import PackedLaunchError, available


class FakeDeviceArray:
    """Anything with the CUDA array interface."""

    def __init__(self, shape, typestr="<f2", ptr=4096, strides=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (ptr, False), "strides": strides,
                                         "version": 3}


def key(*arrays, settings=("s",)):
    return host_plans.plan_key("decode", arrays, settings)[0]


def test_numpy_inputs_and_unhashable_settings_take_the_checked_path():
    a = FakeDeviceArray((1, 2, 3))
    assert key(np.zeros(3), a, a) is None
    assert key(a, a, a, settings=([1],)) is None


def test_the_key_holds_shape_dtype_layout_alignment_and_aliasing():
    q, k, v = (FakeDeviceArray((1, 8, 1, 128), ptr=p) for p in (4096, 8192, 12288))
    base = key(q, k, v)
    assert base == key(*(FakeDeviceArray((1, 8, 1, 128), ptr=p) for p in (1024, 2048, 3072)))
    assert base != key(FakeDeviceArray((1, 8, 2, 128)), k, v)                  # shape
    assert base != key(FakeDeviceArray((1, 8, 1, 128), "<f4"), k, v)           # dtype
    assert base != key(FakeDeviceArray((1, 8, 1, 128), strides=(8, 8, 8, 2)), k, v)
    assert base != key(FakeDeviceArray((1, 8, 1, 128), ptr=4104), k, v)        # 16-B alignment
    assert base != key(q, q, v)                                                # q is k
    assert base != key(q, k, v, settings=("other",))


def test_numba_device_arrays_are_keyed_from_their_fields(monkeypatch):
    """A Numba DeviceNDArray's key is read from its fields (its interface dict costs ~3 us
    per read): the same parts decide it. A stand-in class with those fields plays it here
    (the simulator has no DeviceNDArray)."""
    import ctypes

    class Arr:
        def __init__(self, ptr, shape=(2, 8), dtype=np.float16, strides=None):
            self.device_ctypes_pointer = ctypes.c_void_p(ptr)
            self.shape, self.dtype = shape, np.dtype(dtype)
            self.strides = strides or (shape[1] * self.dtype.itemsize, self.dtype.itemsize)
    monkeypatch.setattr(host_plans, "_device_array_class", lambda: Arr)
    base, ptrs = host_plans.plan_key("decode", [Arr(4096), Arr(8192)], ("s",))
    assert ptrs == [4096, 8192]
    assert base == key(Arr(1024), Arr(2048))
    assert base != key(Arr(1024, (2, 4)), Arr(2048))                        # shape
    assert base != key(Arr(1024, dtype=np.float32), Arr(2048))              # dtype
    assert base != key(Arr(1024, strides=(2, 4)), Arr(2048))                # layout
    assert base != key(Arr(1032), Arr(2048))                                # 16-B alignment
    assert base != key(Arr(1024), Arr(1024))                                # aliasing
    assert key(Arr(1024), FakeDeviceArray((2, 8), ptr=2048)) != base        # another type


class StandInPlan:
    built = []

    def __init__(self, launches, ptrs, result):
        self.launches, self.complete = launches, bool(launches)
        StandInPlan.built.append(self)

    def replay(self, ptrs):
        return ("replayed", tuple(ptrs))


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(host_plans, "enabled", lambda: True)
    monkeypatch.setattr(host_plans, "Plan", StandInPlan)
    StandInPlan.built = []
    host_plans.clear()
    yield
    host_plans.clear()


def test_first_call_records_later_calls_replay(fake_gpu):
    calls = []

    def slow():
        calls.append(1)
        host_plans.record("kernel", (1,), 32, 0, ("args",))
        return ("checked",)
    arrays = [FakeDeviceArray((2, 4), ptr=p) for p in (16, 32, 48)]
    assert host_plans.cached_call("forward", arrays, ("x",), slow) == ("checked",)
    assert len(StandInPlan.built) == 1 and StandInPlan.built[0].launches[0][0] == "kernel"
    moved = [FakeDeviceArray((2, 4), ptr=p) for p in (64, 80, 96)]
    assert host_plans.cached_call("forward", moved, ("x",), slow) == ("replayed", (64, 80, 96))
    assert len(calls) == 1                        # the checked path ran once
    host_plans.record("kernel", (1,), 32, 0, ())  # outside a recording: not kept
    assert len(StandInPlan.built[0].launches) == 1


def test_a_call_without_launches_is_never_planned(fake_gpu):
    calls = []

    def slow():
        calls.append(1)
        return ("checked",)
    arrays = [FakeDeviceArray((2, 4), ptr=p) for p in (16, 32, 48)]
    for _ in range(3):
        assert host_plans.cached_call("forward", arrays, ("y",), slow) == ("checked",)
    assert len(calls) == 3 and len(StandInPlan.built) == 1   # built once, found incomplete


def test_a_moved_private_route_warns_once_and_keeps_the_checked_path(fake_gpu, monkeypatch):
    def broken(*a):
        raise PackedLaunchError("numba-cuda moved")
    monkeypatch.setattr(host_plans, "Plan", broken)
    monkeypatch.setattr(host_plans, "_warned", False)

    def slow():
        host_plans.record("kernel", (1,), 32, 0, ())
        return ("checked",)
    arrays = [FakeDeviceArray((2, 4), ptr=p) for p in (16, 32, 48)]
    with pytest.warns(UserWarning, match="fast launch path is off.*numba-cuda moved"):
        host_plans.cached_call("forward", arrays, ("z",), slow)
    assert host_plans.cached_call("forward", arrays, ("z",), slow) == ("checked",)


def test_the_simulator_has_no_fast_path_and_no_graphs():
    assert not available()
    q = cuda.to_device(np.ones((1, 2, 1, 8), np.float32))
    k = cuda.to_device(np.ones((1, 2, 9, 8), np.float32))
    o, lse = decode(q, k, k)
    np.testing.assert_allclose(o.copy_to_host(), 1.0, rtol=1e-6)
    with pytest.raises(RuntimeError, match="CUDA graphs need a GPU"):
        capture("decode", q, k, k)
    with pytest.raises(ValueError, match="call must be 'forward' or 'decode'"):
        capture("backward", q, k, k)


def test_decode_refuses_a_strided_device_view():
    q = cuda.to_device(np.ones((1, 2, 1, 8), np.float32))
    k = cuda.to_device(np.ones((1, 2, 18, 8), np.float32))
    with pytest.raises(ValueError, match="k on the device must be C-contiguous"):
        decode(q, k[:, :, ::2], k[:, :, ::2])


def test_backward_device_calls_take_the_plan_cache_unless_checked(monkeypatch):
    """`backward(..., kernel="tensor_core")` hands its six arrays and every setting to the
    plan cache (which runs the checked path itself for numpy inputs, the simulator and a
    first call); check=True and the CUDA-core kernels never go there."""
    import flashcourse.cuda as fc
    seen = []

    def cached(entry, arrays, settings, slow):
        seen.append((entry, len(arrays), settings))
        return "planned"
    monkeypatch.setattr(host_plans, "cached_call", cached)
    monkeypatch.setattr(fc, "_backward", lambda *a: "checked path")
    args = [FakeDeviceArray((1, 4, 16), ptr=p) for p in (16, 32, 48, 64, 80, 96)]
    assert fc.backward(*args, kernel="tensor_core", causal=True, precision="fp16") == "planned"
    assert seen == [("backward", 6, ("tensor_core", True, None, (("precision", "fp16"),)))]
    assert fc.backward(*args, kernel="tensor_core", check=True) == "checked path"
    assert fc.backward(*args, kernel="fast") == "checked path"
    assert len(seen) == 1
