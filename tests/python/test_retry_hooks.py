"""Out-of-memory retry hooks registered from Python."""

import sys
import unittest

import support
from support import MiB
import cudacache

HUGE = 1 << 40  # 1 TiB: more than any device, not an absurd size


class RetryHookTest(support.AllocatorTestCase):
    def tearDown(self):
        for handle in list(cudacache._memory._hooks):
            cudacache.remove_retry_hook(handle)
        super().tearDown()

    def test_hook_sees_the_failed_request_and_false_lets_it_fail(self):
        contexts = []
        handle = cudacache.add_retry_hook(lambda context: contexts.append(context) or False)
        self.assertGreater(handle, 0)
        with self.assertRaises(cudacache.OutOfMemoryError):
            cudacache.raw_alloc(HUGE, 0)
        self.assertEqual(len(contexts), 1)
        context = contexts[0]
        self.assertEqual((context.device, context.round, context.requested_bytes),
                         (0, 0, HUGE))
        self.assertEqual(context.allocated_bytes, cudacache.memory_allocated(0))
        self.assertGreater(context.device_total_bytes, 0)
        self.assertLessEqual(context.device_free_bytes, context.device_total_bytes)

    def test_true_retries_at_most_the_maximum_number_of_rounds(self):
        rounds = []
        cudacache.add_retry_hook(lambda context: rounds.append(context.round) or True)
        with self.assertRaises(cudacache.OutOfMemoryError):
            cudacache.raw_alloc(HUGE, 0)
        self.assertEqual(rounds, [0, 1, 2, 3])  # CUDACACHE_MAX_RETRY_ROUNDS

    def test_hook_that_frees_memory_makes_the_retry_succeed(self):
        sim = self.runtime.require_cudasim()
        capacity = sim.cudasim_get_capacity(0)
        self.assertEqual(sim.cudasim_set_capacity(0, 64 * MiB), 0)
        try:
            hoard = [cudacache.raw_alloc(40 * MiB, 0)]

            def release(context):
                if not hoard:
                    return False
                cudacache.raw_free(hoard.pop())
                cudacache.empty_cache()
                return True

            cudacache.add_retry_hook(release)
            ptr = self.alloc(40 * MiB)
            self.assertEqual(hoard, [])
            self.assertNotEqual(ptr, 0)
            self.assertEqual(cudacache.memory_allocated(0), 40 * MiB)
        finally:
            for ptr in hoard:
                cudacache.raw_free(ptr)
            sim.cudasim_set_capacity(0, capacity)

    def test_hooks_run_in_registration_order_and_can_be_removed(self):
        calls = []

        def first(context):
            calls.append("first")
            return False

        def second(context):
            calls.append("second")
            return False

        cudacache.add_retry_hook(first)
        handle = cudacache.add_retry_hook(second)
        with self.assertRaises(cudacache.OutOfMemoryError):
            cudacache.raw_alloc(HUGE, 0)
        self.assertEqual(calls, ["first", "second"])
        cudacache.remove_retry_hook(first)  # by function
        cudacache.remove_retry_hook(handle)  # by handle
        with self.assertRaises(KeyError):
            cudacache.remove_retry_hook(first)
        calls.clear()
        with self.assertRaises(cudacache.OutOfMemoryError):
            cudacache.raw_alloc(HUGE, 0)
        self.assertEqual(calls, [])

    def test_exception_in_a_hook_counts_as_false_and_is_reported(self):
        reported = []
        previous = sys.unraisablehook
        sys.unraisablehook = reported.append
        try:
            cudacache.add_retry_hook(lambda context: 1 / 0)
            with self.assertRaises(cudacache.OutOfMemoryError):
                cudacache.raw_alloc(HUGE, 0)
        finally:
            sys.unraisablehook = previous
        self.assertEqual(len(reported), 1)
        self.assertIs(reported[0].exc_type, ZeroDivisionError)
        self.assertIn("retry hook", reported[0].err_msg)

    def test_a_hook_may_remove_itself_and_removal_waits_for_a_call_on_another_thread(self):
        # Removing from inside a hook returns at once; removing from another thread returns only
        # once the call under way there has ended (the library's guarantee), without deadlock
        # on the module's lock.
        import threading
        calls = []

        def removes_itself(context):
            calls.append(context.round)
            cudacache.remove_retry_hook(removes_itself)
            return False

        cudacache.add_retry_hook(removes_itself)
        with self.assertRaises(cudacache.OutOfMemoryError):
            cudacache.raw_alloc(HUGE, 0)
        with self.assertRaises(cudacache.OutOfMemoryError):
            cudacache.raw_alloc(HUGE, 0)
        self.assertEqual(calls, [0])  # gone after its first call

        started, release, ended = threading.Event(), threading.Event(), []

        def slow(context):
            started.set()
            release.wait(10)
            ended.append(True)
            return False

        cudacache.add_retry_hook(slow)

        def allocate():
            with self.assertRaises(cudacache.OutOfMemoryError):
                cudacache.raw_alloc(HUGE, 0)

        worker = threading.Thread(target=allocate)
        worker.start()
        self.assertTrue(started.wait(10))
        remover = threading.Thread(target=lambda: cudacache.remove_retry_hook(slow))
        remover.start()
        remover.join(0.2)
        self.assertTrue(remover.is_alive())  # waiting for the call under way
        with self.assertRaises(KeyError):  # its removal is under way already
            cudacache.remove_retry_hook(slow)
        release.set()
        remover.join(10)
        worker.join(10)
        self.assertFalse(remover.is_alive())
        self.assertEqual(ended, [True])

    def test_non_callable_is_rejected(self):
        with self.assertRaises(TypeError):
            cudacache.add_retry_hook(42)


if __name__ == "__main__":
    unittest.main()
