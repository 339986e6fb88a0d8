"""tools/torch_replay/torch_replay.py's smallest-device search, the mirror of cudacache-replay's
find_min_capacity (Note [Smallest device] in tools/replay/replayer.h): the same answers on
devices whose outcome is not monotonic in their size. Needs no PyTorch: only the child process
of torch_replay.py imports it."""

import importlib.util
import pathlib
import unittest

REPO = pathlib.Path(__file__).resolve().parents[2]
TORCH_REPLAY = REPO / "tools" / "torch_replay" / "torch_replay.py"
MiB = 1 << 20


def load_torch_replay():
    spec = importlib.util.spec_from_file_location("torch_replay", TORCH_REPLAY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_device(fails=()):
    """Completes from 204 MiB on, but on the sizes (MiB) in `fails`."""
    return lambda size: size // MiB >= 204 and size // MiB not in fails


class MinCapacitySearch(unittest.TestCase):
    def setUp(self):
        self.search = load_torch_replay().find_min_capacity

    def found(self, fails=(), limit=80 << 30):
        return self.search(fake_device(fails), 200 * MiB, limit)[0]

    def test_a_monotonic_device_gives_the_first_that_completes(self):
        found, probes = self.search(fake_device(), 200 * MiB, 80 << 30)
        self.assertEqual(found, 204 * MiB)
        self.assertGreater(probes, 8)  # the bisection and the 8 steps checked above

    def test_a_device_that_fails_above_the_bisected_one_is_no_answer(self):
        self.assertEqual(self.found((206, 210)), 212 * MiB)

    def test_every_step_of_the_window_is_checked(self):
        self.assertEqual(self.found((204 + 2 * 8,)), (204 + 2 * 9) * MiB)
        # The tenth step is outside the window (the ninth, 222 MiB, the bisection tries itself).
        self.assertEqual(self.found((204 + 2 * 10,)), 204 * MiB)
        self.assertEqual(load_torch_replay().verified_steps(20000), 100)

    def test_a_failure_on_the_limit_itself_finds_nothing(self):
        self.assertIsNone(self.found((212,), limit=212 * MiB))
        self.assertEqual(self.found((220,), limit=212 * MiB), 204 * MiB)


if __name__ == "__main__":
    unittest.main()
