"""A primed cache's state saved to a file and set back into a fresh cache of the same class
(mlagate.worker.stepping: op `prime` with `save` / `load`, as l1_parity's rounds load the caches
prefilled once a case): the state comes back bitwise, for the state forms runtimes use, and a
cache whose state cannot be set back is refused without writing anything. The same on real arms
through the suite: tests/test_l1_parity_arms.py."""

import mlx.core as mx
import pytest

from mlagate.worker.stepping import _digest, _save_checked, _save_states, _set_states


class BufferCache:
    """mlx-lm 0.32.2's KVCache: the whole buffers and the offset."""

    def __init__(self):
        self.keys = self.values = None
        self.offset = 0

    @property
    def state(self):
        return self.keys, self.values, self.offset

    @state.setter
    def state(self, v):
        self.keys, self.values, self.offset = v


class FilledCache:
    """mlx-vlm's KVCache: the filled part; setting it sets the offset."""

    def __init__(self):
        self.keys = self.values = None
        self.offset = 0

    @property
    def state(self):
        return self.keys[..., : self.offset, :], self.values[..., : self.offset, :]

    @state.setter
    def state(self, v):
        self.keys, self.values = v
        self.offset = self.keys.shape[2]


class ReadOnlyCache(FilledCache):
    state = property(FilledCache.state.fget)


class LossyCache(BufferCache):
    """A state setter that drops the offset: the state it rebuilds is not the one saved."""

    @property
    def state(self):
        return self.keys, self.values, self.offset

    @state.setter
    def state(self, v):
        self.keys, self.values, self.offset = v[0], v[1], 0


def _primed(cls, T: int = 300, capacity: int = 512):
    c = cls()
    c.keys = mx.random.normal((1, 1, capacity, 8))
    c.values = mx.random.normal((1, 1, capacity, 4)).astype(mx.bfloat16)
    c.offset = T
    return c


@pytest.mark.parametrize("cls", [BufferCache, FilledCache])
def test_a_saved_state_is_set_back_bitwise(cls, tmp_path):
    mx.random.seed(3)
    primed = [_primed(cls), _primed(cls)]
    path = str(tmp_path / "state.safetensors")
    assert _save_states(mx, primed, path)
    fresh = [cls(), cls()]
    _set_states(mx, fresh, path)
    assert _digest(mx, fresh) == _digest(mx, primed)
    assert [c.offset for c in fresh] == [300, 300]


def test_the_digest_sees_one_changed_element(tmp_path):
    mx.random.seed(4)
    a = [_primed(BufferCache)]
    b = [_primed(BufferCache)]
    b[0].keys, b[0].values = mx.array(a[0].keys), mx.array(a[0].values)
    assert _digest(mx, a) == _digest(mx, b)
    b[0].keys[0, 0, 299, 7] = b[0].keys[0, 0, 299, 7] + 1
    assert _digest(mx, a) != _digest(mx, b)
    b[0].keys = a[0].keys
    b[0].offset = 299
    assert _digest(mx, a) != _digest(mx, b)


def test_a_cache_whose_state_cannot_be_set_back_is_not_saved(tmp_path):
    path = tmp_path / "state.safetensors"
    assert not _save_states(mx, [_primed(FilledCache), _primed(ReadOnlyCache)], str(path))
    assert not path.exists()


def test_a_state_that_is_not_set_back_as_saved_is_not_trusted(tmp_path):
    mx.random.seed(6)
    path = str(tmp_path / "state.safetensors")
    sound = [_primed(BufferCache)]
    assert _save_checked(mx, sound, [BufferCache()], path, _digest(mx, sound))
    lossy = [_primed(LossyCache)]
    assert not _save_checked(mx, lossy, [LossyCache()], path, _digest(mx, lossy))
