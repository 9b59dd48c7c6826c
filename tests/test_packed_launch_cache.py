"""packed_launch.LaunchCache: the first launch of an argument layout goes through Numba,
later ones replay the packed arguments with this call's data pointers (a GPU is needed
for the real replay: benchmarks/gpu_paged.py --check compares its results bit for bit;
here a stand-in PackedLaunch records what the cache asks of it)."""

import numpy as np
import pytest

from flashcourse.cuda.common import packed_launch as pl


class FakeArray:
    def __init__(self, ptr, shape=(4, 8), dtype=np.float32):
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.strides = tuple(int(s) for s in np.empty(shape, dtype).strides)
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape}


class FakePacked:
    made = []

    def __init__(self, kernel, args, grid, block, shared):
        self._data_slot = {i: None for i, a in enumerate(args) if isinstance(a, FakeArray)}
        self.pointers, self.launched = {}, []
        FakePacked.made.append(self)

    def set_pointer(self, i, ptr):
        self.pointers[i] = ptr

    def launch(self, stream=0):
        self.launched.append((dict(self.pointers), stream))


class Refused(FakePacked):
    def __init__(self, *a):
        raise pl.PackedLaunchError("not a Numba device array")


@pytest.fixture
def gpu_like(monkeypatch):
    monkeypatch.setattr(pl, "available", lambda: True)
    monkeypatch.setattr(pl, "PackedLaunch", FakePacked)
    FakePacked.made = []


def test_first_call_slow_then_replayed_with_this_calls_pointers(gpu_like):
    cache, slow_calls, kern = pl.LaunchCache(), [], object()
    args1 = (FakeArray(1000), FakeArray(2000), np.int32(7), np.float32(0.5))
    cache.launch(kern, (3,), 128, 0, args1, 0, lambda: slow_calls.append(1))
    assert slow_calls == [1] and len(FakePacked.made) == 1
    args2 = (FakeArray(3000), FakeArray(4000), np.int32(7), np.float32(0.5))
    cache.launch(kern, (3,), 128, 0, args2, 0, lambda: slow_calls.append(2))
    assert slow_calls == [1]                          # replayed, not Numba's launch
    assert FakePacked.made[0].launched == [({0: 3000, 1: 4000}, 0)]


@pytest.mark.parametrize("change", ["shape", "dtype", "scalar", "grid", "kernel"])
def test_another_layout_is_packed_anew(gpu_like, change):
    cache, slow_calls, kern = pl.LaunchCache(), [], object()
    base = dict(a=FakeArray(1000), n=np.int32(7), grid=(3,), kern=kern)
    cache.launch(base["kern"], base["grid"], 128, 0, (base["a"], base["n"]), 0,
                 lambda: slow_calls.append("first"))
    other = dict(base)
    if change == "shape":
        other["a"] = FakeArray(1000, shape=(4, 9))
    elif change == "dtype":
        other["a"] = FakeArray(1000, dtype=np.float16)
    elif change == "scalar":
        other["n"] = np.int32(8)
    elif change == "grid":
        other["grid"] = (4,)
    else:
        other["kern"] = object()
    cache.launch(other["kern"], other["grid"], 128, 0, (other["a"], other["n"]), 0,
                 lambda: slow_calls.append("second"))
    assert slow_calls == ["first", "second"] and len(FakePacked.made) == 2


def test_refused_packing_falls_back_to_numba_every_time(gpu_like, monkeypatch):
    monkeypatch.setattr(pl, "PackedLaunch", Refused)
    cache, slow_calls, kern = pl.LaunchCache(), [], object()
    for i in range(3):
        cache.launch(kern, (1,), 32, 0, (FakeArray(1000),), 0, lambda i=i: slow_calls.append(i))
    assert slow_calls == [0, 1, 2]


def test_off_means_numbas_launch_always(monkeypatch):
    monkeypatch.setattr(pl, "available", lambda: False)
    cache, slow_calls = pl.LaunchCache(), []
    for i in range(2):
        cache.launch(object(), (1,), 32, 0, (FakeArray(1000),), 0, lambda i=i: slow_calls.append(i))
    assert slow_calls == [0, 1]


def test_stream_handles():
    class H:
        value = 1234

    class S:
        handle = H()

    class S2:
        handle = 77
    assert pl.stream_handle(0) == 0 and pl.stream_handle(None) == 0
    assert pl.stream_handle(S()) == 1234 and pl.stream_handle(S2()) == 77
