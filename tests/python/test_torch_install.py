"""cudacache.torch.install() and its patches, against a recording stand-in for PyTorch.

PyTorch is not installed here. FakeTorchForInstallTests builds the few modules install() uses
(torch, torch.cuda, torch.cuda.memory) and records what it is asked; its CUDAPluggableAllocator
does what PyTorch's does with the library (ctypes.CDLL(path), symbol addresses). The real
PyTorch path runs in tests/gpu/torch_scenarios.py on a GPU machine.
"""

import ctypes
import io
import os
import subprocess
import sys
import tempfile
import types
import unittest
from unittest import mock

import support
from support import MiB
import cudacache
import cudacache.torch as cudacache_torch
from test_snapshot import PlainDataUnpickler

MEMORY_FUNCTIONS = cudacache_torch.PATCHED_FUNCTIONS
PRIVATE_FUNCTIONS = cudacache_torch.PATCHED_PRIVATE_FUNCTIONS


class FakeTorchForInstallTests:
    """A recording test double of the parts of `torch` that cudacache.torch touches.

    Not PyTorch. State: `cuda_initialized` (torch.cuda.is_initialized()),
    `allocator_initialized` (makes change_current_allocator refuse, as PyTorch does once its
    allocator was used), `registered` ((path, alloc name, free name) per CUDAPluggableAllocator)
    and `current_allocator`.
    """

    MODULES = ("torch", "torch.cuda", "torch.cuda.memory")

    def __init__(self):
        self.cuda_initialized = False
        self.allocator_initialized = False
        self.registered = []
        self.current_allocator = None
        self.torch = types.ModuleType("torch")
        self.cuda = types.ModuleType("torch.cuda")
        self.memory = types.ModuleType("torch.cuda.memory")
        self.torch.__version__ = "2.99.0+fake"
        self.torch.cuda = self.cuda
        self.cuda.memory = self.memory
        self.torch.OutOfMemoryError = self._exception_like_pytorchs("torch.OutOfMemoryError")
        self.cuda.OutOfMemoryError = self.torch.OutOfMemoryError
        self.cuda.is_initialized = lambda: self.cuda_initialized
        fake = self

        class CUDAPluggableAllocator:
            def __init__(self, path, alloc_fn_name, free_fn_name):
                library = ctypes.CDLL(path)
                self.alloc_address = ctypes.cast(getattr(library, alloc_fn_name),
                                                 ctypes.c_void_p).value
                self.free_address = ctypes.cast(getattr(library, free_fn_name),
                                                ctypes.c_void_p).value
                assert self.alloc_address and self.free_address
                fake.registered.append((path, alloc_fn_name, free_fn_name))

        def change_current_allocator(allocator):
            if fake.allocator_initialized:
                raise RuntimeError("Can't swap an already initialized allocator")
            fake.current_allocator = allocator

        self.memory.CUDAPluggableAllocator = CUDAPluggableAllocator
        self.memory.change_current_allocator = change_current_allocator

        class TensorBase:  # torch._C.TensorBase: where record_stream really lives
            def record_stream(self, stream):
                fake.recorded_streams.append((self, stream))

        class Tensor(TensorBase):
            """A CUDA tensor over `nbytes` at device address `data_ptr`."""

            def __init__(self, data_ptr, nbytes):
                self.storage = types.SimpleNamespace(data_ptr=lambda: data_ptr,
                                                     nbytes=lambda: nbytes)

            def untyped_storage(self):
                return self.storage

        self.recorded_streams = []
        self.torch.Tensor = Tensor
        # What torch.cuda answers under a pluggable allocator before cudacache patches it.
        for name in MEMORY_FUNCTIONS + PRIVATE_FUNCTIONS:
            original = self._unsupported(name)
            setattr(self.memory, name, original)
            if name in MEMORY_FUNCTIONS:
                setattr(self.cuda, name, original)

    @staticmethod
    def _exception_like_pytorchs(name):
        # PyTorch creates torch.OutOfMemoryError with PyErr_NewExceptionWithDoc.
        create = ctypes.pythonapi.PyErr_NewExceptionWithDoc
        create.restype = ctypes.py_object
        create.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.py_object, ctypes.c_void_p]
        return create(name.encode(), b"device out of memory", RuntimeError, None)

    @staticmethod
    def _unsupported(name):
        def original(*args, **kwargs):
            raise RuntimeError(f"CUDAPluggableAllocator does not yet support {name}")

        original.__name__ = name
        return original

    def inject(self):
        self._saved = {name: sys.modules.get(name) for name in self.MODULES}
        sys.modules.update(zip(self.MODULES, (self.torch, self.cuda, self.memory)))
        return self

    def remove(self):
        for name, module in self._saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def reset_cudacache_torch():
    cudacache_torch.uninstall_patches()
    cudacache_torch._allocator = None
    cudacache_torch._out_of_memory_error_class = None


# The allocator configuration variables of PyTorch, which install() reads.
PYTORCH_CONF_VARIABLES = cudacache_torch.PYTORCH_CONF_VARIABLES


def without_pytorch_conf(environ):
    return {name: value for name, value in environ.items() if name not in PYTORCH_CONF_VARIABLES}


class InstallTestCase(support.AllocatorTestCase):
    def setUp(self):
        super().setUp()
        # This process has allocated already: a PyTorch variable could not be applied here.
        patcher = mock.patch.dict(os.environ, without_pytorch_conf(os.environ), clear=True)
        patcher.start()
        self.addCleanup(patcher.stop)
        self.fake = FakeTorchForInstallTests().inject()
        reset_cudacache_torch()
        self.alloc_fn, self.free_fn = support.pluggable_functions()

    def tearDown(self):
        reset_cudacache_torch()
        self.fake.remove()
        super().tearDown()


class InstallTest(InstallTestCase):
    def test_registers_the_library_with_pytorchs_pluggable_allocator(self):
        allocator = cudacache_torch.install()
        path = cudacache.library_path()
        self.assertTrue(os.path.isfile(path))
        self.assertEqual(self.fake.registered, [(path, "cudacache_malloc", "cudacache_free")])
        self.assertIs(self.fake.current_allocator, allocator)
        self.assertEqual(allocator.alloc_address,
                         ctypes.cast(self.lib.cdll.cudacache_malloc, ctypes.c_void_p).value)
        self.assertTrue(cudacache_torch.is_installed())

    def test_second_install_registers_nothing_more(self):
        first = cudacache_torch.install()
        self.assertIs(cudacache_torch.install(), first)
        self.assertEqual(len(self.fake.registered), 1)

    def test_refuses_once_cuda_is_initialized(self):
        self.fake.cuda_initialized = True
        with self.assertRaises(cudacache_torch.InstallError) as caught:
            cudacache_torch.install()
        self.assertIn("before the first CUDA tensor", str(caught.exception))
        self.assertEqual(self.fake.registered, [])
        self.assertEqual(cudacache_torch.patched_functions(), [])
        self.assertFalse(cudacache_torch.is_installed())

    def test_pytorchs_swap_refusal_becomes_the_same_clear_error(self):
        self.fake.allocator_initialized = True
        with self.assertRaises(cudacache_torch.InstallError) as caught:
            cudacache_torch.install()
        self.assertIn("must run before PyTorch initializes CUDA", str(caught.exception))
        self.assertIn("already initialized", str(caught.exception.__cause__))
        self.assertFalse(cudacache_torch.is_installed())
        self.assertEqual(cudacache_torch.patched_functions(), [])

    def test_pytorch_without_the_pluggable_interface_is_refused(self):
        del self.fake.memory.CUDAPluggableAllocator
        with self.assertRaises(cudacache_torch.InstallError) as caught:
            cudacache_torch.install()
        self.assertIn("PyTorch 2.0 or newer", str(caught.exception))

    def test_without_torch_install_raises_import_error(self):
        sys.modules["torch"] = None  # makes `import torch` fail
        with self.assertRaises(ImportError) as caught:
            cudacache_torch.install()
        self.assertIn("PyTorch", str(caught.exception))


class PatchTest(InstallTestCase):
    def test_patched_functions_answer_from_cudacache(self):
        cudacache_torch.install()
        cuda, memory = self.fake.cuda, self.fake.memory
        base = cudacache.memory_allocated(0)
        ptr = self.alloc_fn(1000, 0, None)
        try:
            self.assertEqual(cuda.memory_allocated(), base + 1024)
            self.assertEqual(memory.memory_allocated(0), base + 1024)
            self.assertEqual(cuda.memory_stats()["allocated_bytes.all.current"], base + 1024)
            self.assertGreaterEqual(cuda.max_memory_allocated(types.SimpleNamespace(
                type="cuda", index=0)), base + 1024)
            self.assertEqual(cuda.memory_reserved(0), cudacache.memory_reserved(0))
            nested = cuda.memory_stats_as_nested_dict(0)
            self.assertEqual(nested["allocated_bytes"]["all"]["current"], base + 1024)
            self.assertEqual(nested["num_ooms"], cudacache.memory_stats(0)["num_ooms"])
            self.assertTrue(any(b["address"] == ptr for s in cuda.memory_snapshot()
                                for b in s["blocks"]))
            self.assertEqual(memory._snapshot(), cudacache.snapshot())
            with tempfile.TemporaryDirectory() as temp:
                path = os.path.join(temp, "dump.pickle")
                memory._dump_snapshot(path)
                with open(path, "rb") as file:
                    dumped = PlainDataUnpickler(io.BytesIO(file.read())).load()
            self.assertEqual(dumped["segments"], cudacache.memory_snapshot())
        finally:
            self.free_fn(ptr, 1000, 0, None)
        with self.assertRaisesRegex(ValueError, "stacks must be 'python' or 'all'"):
            memory._record_memory_history(stacks="java", max_entries=100)
        memory._record_memory_history(max_entries=100)
        try:
            self.free_fn(self.alloc_fn(3000, 0, None), 3000, 0, None)
            with tempfile.TemporaryDirectory() as temp:
                path = os.path.join(temp, "dump.pickle")
                memory._dump_snapshot(path)
                with open(path, "rb") as file:
                    dumped = PlainDataUnpickler(io.BytesIO(file.read())).load()
            self.assertEqual([(e["action"], e["size"]) for e in dumped["device_traces"][0]],
                             [("alloc", 3000), ("free_requested", 3000), ("free_completed", 3000)])
        finally:
            memory._record_memory_history(enabled=None)
        cudacache.record_history(1)  # drop the entries for the tests that follow
        cudacache.record_history(0)
        self.assertGreater(cuda.memory_reserved(0), 0)
        cuda.empty_cache()
        self.assertEqual(cuda.memory_reserved(0), 0)
        cuda.reset_peak_memory_stats(0)
        self.assertEqual(cuda.max_memory_allocated(0), 0)
        cuda.reset_accumulated_memory_stats(0)
        self.assertEqual(cuda.memory_stats(0)["allocation.all.allocated"], 0)

    def test_every_listed_function_is_patched_in_both_modules(self):
        originals = {(module, name): getattr(module, name)
                     for module in (self.fake.cuda, self.fake.memory)
                     for name in MEMORY_FUNCTIONS}
        originals.update({(self.fake.memory, name): getattr(self.fake.memory, name)
                          for name in PRIVATE_FUNCTIONS})
        cudacache_torch.install()
        for (module, name), original in originals.items():
            with self.subTest(module=module.__name__, function=name):
                self.assertIsNot(getattr(module, name), original)
        self.assertIn("record_stream", self.fake.torch.Tensor.__dict__)
        self.assertEqual(len(cudacache_torch.patched_functions()), len(originals) + 1)

    def test_uninstall_patches_restores_the_originals(self):
        originals = {(module, name): getattr(module, name)
                     for module in (self.fake.cuda, self.fake.memory)
                     for name in MEMORY_FUNCTIONS}
        cudacache_torch.install()
        cudacache_torch.uninstall_patches()
        for (module, name), original in originals.items():
            self.assertIs(getattr(module, name), original)
        self.assertNotIn("record_stream", self.fake.torch.Tensor.__dict__)  # inherited again
        with self.assertRaises(RuntimeError):
            self.fake.cuda.memory_allocated()
        self.assertEqual(cudacache_torch.patched_functions(), [])
        self.assertTrue(cudacache_torch.is_installed())  # the allocator cannot be swapped back

    def test_record_stream_reaches_cudacache(self):
        sim = self.runtime.require_cudasim()
        cudacache_torch.install()
        stream = self.runtime.create_stream()
        ptr = self.alloc_fn(4096, 0, None)
        tensor = self.fake.torch.Tensor(ptr, 4096)
        torch_stream = types.SimpleNamespace(cuda_stream=stream)

        def state_of(address):
            return next((b["state"] for s in cudacache.memory_snapshot() for b in s["blocks"]
                         if b["address"] == address), None)

        try:
            self.assertEqual(sim.cudasim_hold_stream(ctypes.c_void_p(stream)), 0)
            tensor.record_stream(torch_stream)
            self.assertEqual(self.fake.recorded_streams, [(tensor, torch_stream)])
            self.free_fn(ptr, 4096, 0, None)
            # Work queued on the held stream is pending: the block must not be reused yet.
            self.assertEqual(state_of(ptr), "active_pending_free")
            other = self.alloc_fn(4096, 0, None)
            self.assertNotEqual(other, ptr)
            self.free_fn(other, 4096, 0, None)
        finally:
            sim.cudasim_release_stream(ctypes.c_void_p(stream))
        self.free_fn(self.alloc_fn(512, 0, None), 512, 0, None)  # polls the stream events
        self.assertEqual(state_of(ptr), "inactive")
        self.runtime.destroy_stream(stream)

    def test_record_stream_of_an_unknown_pointer_raises(self):
        with self.assertRaises(cudacache.CudacacheError) as caught:
            cudacache.record_stream(0x1000, 0)
        self.assertIn("CUDACACHE_UNKNOWN_POINTER", str(caught.exception))

    def test_uninstall_leaves_a_function_someone_else_replaced(self):
        cudacache_torch.install()

        def theirs():
            return 42

        self.fake.cuda.memory_allocated = theirs
        cudacache_torch.uninstall_patches()
        self.assertIs(self.fake.cuda.memory_allocated, theirs)

    def test_patch_false_leaves_torch_alone(self):
        original = self.fake.cuda.memory_allocated
        cudacache_torch.install(patch=False)
        self.assertEqual(len(self.fake.registered), 1)
        self.assertIs(self.fake.cuda.memory_allocated, original)
        self.assertEqual(cudacache_torch.patched_functions(), [])

    def test_environment_opt_out(self):
        original = self.fake.cuda.memory_stats
        with mock.patch.dict(os.environ, {"CUDACACHE_TORCH_PATCH": "0"}):
            cudacache_torch.install()
        self.assertEqual(len(self.fake.registered), 1)
        self.assertIs(self.fake.cuda.memory_stats, original)


class OutOfMemoryTest(InstallTestCase):
    def test_error_class_is_both_torchs_and_cudacaches(self):
        error_class = cudacache_torch.OutOfMemoryError
        self.assertTrue(issubclass(error_class, self.fake.torch.OutOfMemoryError))
        self.assertTrue(issubclass(error_class, cudacache.OutOfMemoryError))
        self.assertIs(cudacache_torch.OutOfMemoryError, error_class)  # created once
        with self.assertRaises(self.fake.torch.OutOfMemoryError):
            raise error_class("CUDA out of memory")

    def test_raise_on_oom_turns_a_null_allocation_into_the_typed_error(self):
        cudacache_torch.install()
        with self.assertRaises(self.fake.torch.OutOfMemoryError) as caught:
            with cudacache_torch.raise_on_oom():
                self.assertIsNone(self.alloc_fn(1 << 40, 0, None))  # what PyTorch would get
        self.assertIsInstance(caught.exception, cudacache.OutOfMemoryError)
        self.assertEqual(str(caught.exception), cudacache.last_error())
        self.assertIn("out of memory", str(caught.exception).lower())

    def test_raise_on_oom_is_silent_when_allocations_succeed(self):
        cudacache_torch.install()
        before = cudacache.memory_allocated(0)
        with cudacache_torch.raise_on_oom():
            ptr = self.alloc_fn(4096, 0, None)
        self.assertIsInstance(ptr, int)
        self.assertNotEqual(ptr, 0)
        self.assertEqual(cudacache.memory_allocated(0), before + 4096)
        self.free_fn(ptr, 4096, 0, None)
        self.assertEqual(cudacache.memory_allocated(0), before)

    def test_raise_on_oom_lets_other_errors_through(self):
        with self.assertRaises(KeyError):
            with cudacache_torch.raise_on_oom():
                raise KeyError("unrelated")
        with self.assertRaises(RuntimeError) as caught:
            with cudacache_torch.raise_on_oom():
                raise RuntimeError("unrelated")
        self.assertNotIsInstance(caught.exception, cudacache.OutOfMemoryError)

    def test_convert_oom(self):
        error_class = cudacache_torch.OutOfMemoryError
        said = RuntimeError("CUDA out of memory. Tried to allocate 1.00 TiB")
        converted = cudacache_torch.convert_oom(said)
        self.assertIsInstance(converted, error_class)
        self.assertIs(converted.__cause__, said)
        other = RuntimeError("an illegal memory access was encountered")
        self.assertIs(cudacache_torch.convert_oom(other), other)
        before = cudacache_torch.oom_count()
        self.assertIsNone(self.alloc_fn(1 << 40, 0, None))
        self.assertEqual(cudacache_torch.oom_count(), before + 1)
        counted = cudacache_torch.convert_oom(other, oom_count_before=before)
        self.assertIsInstance(counted, error_class)
        self.assertIn(cudacache.last_error(), str(counted))
        self.assertIs(cudacache_torch.convert_oom(counted), counted)

    def test_check_allocation(self):
        def tensor(nbytes, data_ptr):
            storage = types.SimpleNamespace(nbytes=lambda: nbytes, data_ptr=lambda: data_ptr)
            return types.SimpleNamespace(untyped_storage=lambda: storage)

        good = tensor(4096, 0x7000_0000)
        self.assertIs(cudacache_torch.check_allocation(good), good)
        empty = tensor(0, 0)
        self.assertIs(cudacache_torch.check_allocation(empty), empty)
        with self.assertRaises(self.fake.torch.OutOfMemoryError):
            cudacache_torch.check_allocation(tensor(4096, 0))


class ConfigurationAtInstallTest(unittest.TestCase):
    """install(conf=...) needs a process that has allocated nothing yet."""

    def run_with_fake_torch(self, code, **environment):
        support.library()
        env = dict(without_pytorch_conf(os.environ), PYTHONPATH=str(support.PACKAGE_ROOT),
                   **environment)
        prologue = ("import test_torch_install as t\nfake = t.FakeTorchForInstallTests().inject()\n"
                    "import cudacache, cudacache.torch\n")
        return subprocess.run([sys.executable, "-c", prologue + code], env=env,
                              cwd=os.path.dirname(os.path.abspath(__file__)),
                              capture_output=True, text=True, timeout=60)

    def test_conf_is_applied_before_registration(self):
        result = self.run_with_fake_torch(
            "cudacache.torch.install(conf='max_split_size_mb:64')\n"
            "print(len(fake.registered), cudacache.memory_stats(0)['max_split_size'])\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split(), ["1", str(64 * MiB)])

    def test_bad_conf_registers_nothing(self):
        result = self.run_with_fake_torch(
            "try:\n"
            "    cudacache.torch.install(conf='max_split_size_mb:1')\n"
            "except ValueError as error:\n"
            "    print('refused', len(fake.registered), cudacache.torch.is_installed())\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split(), ["refused", "0", "False"])

    def test_pytorch_cuda_alloc_conf_is_applied_under_conf_and_cudacache_conf(self):
        result = self.run_with_fake_torch(
            "cudacache.torch.install(conf='garbage_collection_threshold:0.5')\n"
            "print(len(fake.registered), cudacache.memory_stats(0)['max_split_size'])\n"
            "print(cudacache.config_help())\n",
            PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:128,garbage_collection_threshold:0.9,"
                                    "roundup_power2_divisions:4",
            CUDACACHE_CONF="roundup_power2_divisions:2")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split()[:2], ["1", str(128 * MiB)])
        self.assertIn("garbage_collection_threshold = 0.5 ", result.stdout)
        self.assertIn("roundup_power2_divisions = 2 ", result.stdout)

    def test_pytorch_alloc_conf_is_read_when_the_cuda_variable_is_unset(self):
        result = self.run_with_fake_torch(
            "cudacache.torch.install()\n"
            "print(cudacache.memory_stats(0)['max_split_size'])\n",
            PYTORCH_ALLOC_CONF="max_split_size_mb:64")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split(), [str(64 * MiB)])

    def test_bad_pytorch_cuda_alloc_conf_registers_nothing(self):
        result = self.run_with_fake_torch(
            "try:\n"
            "    cudacache.torch.install()\n"
            "except ValueError as error:\n"
            "    print('refused', len(fake.registered), cudacache.torch.is_installed())\n"
            "    print(error)\n",
            PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:64,frobnicate:3")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split()[:3], ["refused", "0", "False"])
        self.assertIn("unknown key 'frobnicate'", result.stdout)


class PyTorchAllocConfPlanTest(unittest.TestCase):
    """plan_pytorch_alloc_conf(): how install() sorts PYTORCH_CUDA_ALLOC_CONF (changes nothing)."""

    def plan(self, value, overrides=None):
        return cudacache_torch.plan_pytorch_alloc_conf("PYTORCH_CUDA_ALLOC_CONF", value, overrides)

    def test_keys_are_sorted_by_what_cudacache_does_with_them(self):
        plan = self.plan(" max_split_size_mb : 128, roundup_power2_divisions:[256:1, >:8],"
                         "backend:native,pinned_use_background_threads:True,"
                         "max_non_split_rounding_mb:64,max_split_size_mb:256,")
        self.assertEqual(plan.cudacache_conf(),
                         "roundup_power2_divisions:[256:1,>:8],max_split_size_mb:256")
        self.assertEqual(plan.backend, "native")
        self.assertEqual(plan.host, ["pinned_use_background_threads"])
        self.assertEqual(list(plan.not_honoured), ["max_non_split_rounding_mb"])
        [warning] = plan.warnings()
        self.assertIn("'max_non_split_rounding_mb' is ignored", warning)

    def test_cudacache_settings_take_precedence(self):
        plan = self.plan("max_split_size_mb:128,expandable_segments:True,"
                         "garbage_collection_threshold:0.5",
                         {"max_split_size_mb": ("256", "CUDACACHE_CONF"),
                          "policy": ("cudacache", "install(conf=...)")})
        self.assertEqual(plan.cudacache_conf(), "garbage_collection_threshold:0.5")
        self.assertEqual(plan.overridden, {"max_split_size_mb": "CUDACACHE_CONF"})
        self.assertEqual(plan.conflicts, {"expandable_segments": "install(conf=...)"})
        [warning] = plan.warnings()
        self.assertIn("policy:cudacache", warning)
        # policy:pytorch is what expandable_segments:True selects anyway.
        plan = self.plan("expandable_segments:True", {"policy": ("pytorch", "CUDACACHE_CONF")})
        self.assertEqual(plan.cudacache_conf(), "expandable_segments:True")

    def test_errors_name_the_key(self):
        for value, expected in (("max_split_size_mb:128,bogus:1", "unknown key 'bogus'"),
                                ("record_history:10", "'record_history' is a cudacache option"),
                                ("max_page_size_mb:2", "'max_page_size_mb' is a cudacache option"),
                                ("cut_pages:True", "'cut_pages' is a cudacache option"),
                                ("publish_stats:False", "'publish_stats' is a cudacache option"),
                                ("max_split_size_mb", "malformed entry 'max_split_size_mb'"),
                                ("backend:other", "unknown backend 'other'")):
            with self.subTest(value=value):
                with self.assertRaises(cudacache.ConfigurationError) as caught:
                    self.plan(value)
                self.assertIn(expected, str(caught.exception))
                self.assertIn("PYTORCH_CUDA_ALLOC_CONF", str(caught.exception))
        with self.assertRaises(cudacache_torch.InstallError) as caught:
            self.plan("backend:cudaMallocAsync")
        self.assertIn("cudaMallocAsync", str(caught.exception))

    def test_which_variable(self):
        self.assertEqual(cudacache_torch.pytorch_alloc_conf({}), (None, None))
        self.assertEqual(cudacache_torch.pytorch_alloc_conf({"PYTORCH_ALLOC_CONF": "a:1"}),
                         ("PYTORCH_ALLOC_CONF", "a:1"))
        self.assertEqual(  # as PyTorch 2.15 for CUDA: the CUDA variable first, even empty
            cudacache_torch.pytorch_alloc_conf({"PYTORCH_ALLOC_CONF": "a:1",
                                                "PYTORCH_CUDA_ALLOC_CONF": ""}),
            ("PYTORCH_CUDA_ALLOC_CONF", ""))


if __name__ == "__main__":
    unittest.main()
