"""The libtorch shim (torch_shim/, libcudacache_torch.so) with real PyTorch on cudasim.

cudacache.torch.install() registers the shim's cudacache_torch_malloc / cudacache_torch_free
and its C++ hooks: an out-of-memory is a torch.OutOfMemoryError raised by PyTorch itself with
cudacache's message, and torch.cuda.empty_cache() / Tensor.record_stream() reach cudacache
without the Python patches (install(patch=False)).

CTest passes the built shim as CUDACACHE_TORCH_SHIM. Exits 77 (skipped) when torch is not
installed or the shim was not built (CMake did not find PyTorch, or CUDACACHE_TORCH_SHIM=OFF).
"""

import os
import pathlib
import sys
import textwrap
import unittest

import torchsim
from torchsim import MiB, run_scenario
from torchsim import assert_record_stream_delayed_reuse, record_stream_scenario

SHIM = os.environ.get("CUDACACHE_TORCH_SHIM", "")

INSTALL_WITHOUT_PATCHES = """
import cudacache, cudacache.torch
cudacache.torch.install(patch=False)
assert cudacache.torch.shim_path() is not None, "the shim is not in use"
assert cudacache.torch.shim_hooks_registered()
"""


def run_with_shim(code, **kwargs):
    return run_scenario(INSTALL_WITHOUT_PATCHES + textwrap.dedent(code), **kwargs)


class TorchShim(unittest.TestCase):
    def test_install_registers_the_shim_and_its_hooks(self):
        r = run_with_shim("""
            x = torch.empty(10, device="cuda")
            report({"shim": str(cudacache.torch.shim_path()),
                    "empty_cache_patched": hasattr(torch.cuda.empty_cache, "_cudacache_patch"),
                    "record_stream_patched": "record_stream" in torch.Tensor.__dict__,
                    "allocated": cudacache.memory_allocated()})
            """)
        self.assertEqual(r["shim"], str(pathlib.Path(SHIM).resolve()))
        self.assertFalse(r["empty_cache_patched"])
        self.assertFalse(r["record_stream_patched"])
        self.assertEqual(r["allocated"], 512)

    def test_out_of_memory_raises_torch_out_of_memory_error(self):
        r = run_with_shim("""
            errors = []
            for attempt in ("empty", "raw_alloc"):
                try:
                    if attempt == "empty":
                        torch.empty(1024, 1024, 1024, 64, device="cuda")
                    else:   # CUDAPluggableAllocator::raw_alloc_with_stream
                        torch.cuda.caching_allocator_alloc(256 * 2**30)
                    errors.append(None)
                except torch.OutOfMemoryError as e:
                    errors.append([type(e).__module__ + "." + type(e).__qualname__,
                                   isinstance(e, RuntimeError), str(e),
                                   cudacache.last_error()])
            x = torch.empty(1000, device="cuda")            # normal work goes on
            y = torch.zeros(2**20, dtype=torch.uint8, device="cuda")
            report({"errors": errors, "ptr": x.data_ptr(), "zeros": y.cpu().sum().item(),
                    "num_ooms": cudacache.memory_stats()["num_ooms"],
                    "allocated": cudacache.memory_allocated()})
            """, capacity="4GiB")
        for error in r["errors"]:
            self.assertIsNotNone(error)
            name, is_runtime_error, message, last_error = error
            self.assertEqual(name, "torch.OutOfMemoryError")
            self.assertTrue(is_runtime_error)
            # cudacache's own report, whole: size, device, capacity.
            self.assertTrue(message.startswith("CUDA out of memory (cudacache)"), message)
            self.assertIn("Tried to allocate 256.00 GiB on device 0", message)
            self.assertIn("total capacity of 4.00 GiB", message)
            self.assertEqual(message, last_error)
        self.assertNotEqual(r["ptr"], 0)
        self.assertEqual(r["zeros"], 0)
        self.assertEqual(r["num_ooms"], 2)
        self.assertEqual(r["allocated"], 4096 + MiB)

    def test_out_of_memory_with_the_patches_and_raise_on_oom(self):
        r = run_scenario("""
            import cudacache, cudacache.torch
            cudacache.torch.install()
            try:
                with cudacache.torch.raise_on_oom():
                    torch.empty(1024, 1024, 1024, 64, device="cuda")
                error = None
            except torch.OutOfMemoryError as e:
                error = [type(e).__name__, isinstance(e, cudacache.OutOfMemoryError), str(e)]
            report({"error": error, "num_ooms": torch.cuda.memory_stats()["num_ooms"]})
            """, capacity="4GiB")
        self.assertEqual(r["error"][:2], ["OutOfMemoryError", True])
        self.assertIn("Tried to allocate 256.00 GiB on device 0", r["error"][2])
        self.assertEqual(r["num_ooms"], 1)

    def test_empty_cache_reaches_cudacache_without_patches(self):
        r = run_with_shim("""
            keep = torch.empty(2**21 + 1, dtype=torch.uint8, device="cuda")  # large pool
            temp = torch.empty(30 * 2**20, dtype=torch.uint8, device="cuda")
            del temp
            before = [cudacache.memory_reserved(), cudasim_counters()["in_use_bytes"]]
            torch.cuda.empty_cache()
            after = [cudacache.memory_reserved(), cudasim_counters()["in_use_bytes"],
                     cudacache.memory_allocated()]
            report({"before": before, "after": after})
            """, controls=True, capacity="16GiB")
        # cudacache's default policy (20 MiB pages with room on a 16 GiB device: 1/512 of it,
        # at most PyTorch's 20 MiB): the 30 MiB temporary extends the first 20 MiB page by one
        # more, which empty_cache unmaps and releases.
        self.assertEqual(r["before"], [40 * MiB, 40 * MiB])
        self.assertEqual(r["after"], [20 * MiB, 20 * MiB, 2 * MiB + 512])

    def test_record_stream_reaches_cudacache_without_patches(self):
        r = run_with_shim(record_stream_scenario("""
            empty = torch.empty(0, device="cuda")
            empty.record_stream(side)                       # a NULL storage: ignored
            report({"old": old, "while_held": while_held, "after": after})
            """), controls=True)
        assert_record_stream_delayed_reuse(self, r)

    def test_hooks_refuse_an_allocator_that_is_not_cudacache(self):
        r = run_scenario(f"""
            import ctypes, ctypes.util
            shim = ctypes.CDLL({SHIM!r})
            shim.cudacache_torch_last_error.restype = ctypes.c_char_p
            native = [shim.cudacache_torch_register_hooks(),
                      shim.cudacache_torch_last_error().decode()]
            foreign = torch.cuda.memory.CUDAPluggableAllocator(
                ctypes.util.find_library("c"), "malloc", "free")
            torch.cuda.memory.change_current_allocator(foreign)
            other = [shim.cudacache_torch_register_hooks(),
                     shim.cudacache_torch_last_error().decode()]
            report({{"native": native, "other": other}})
            """)
        self.assertEqual(r["native"][0], -1)
        self.assertIn("not a CUDAPluggableAllocator", r["native"][1])
        self.assertEqual(r["other"][0], -1)
        self.assertIn("does not allocate with cudacache_torch_malloc", r["other"][1])

    def test_shim_off_and_required(self):
        r = run_scenario("""
            import cudacache, cudacache.torch
            try:
                cudacache.torch.install(shim="/nonexistent/libcudacache_torch.so")
                required = None
            except cudacache.torch.InstallError as e:
                required = str(e)
            cudacache.torch.install(shim=False)
            silent = torch.empty(1024, 1024, 1024, 64, device="cuda")
            report({"required": required, "shim": cudacache.torch.shim_path(),
                    "silent_ptr": silent.data_ptr(),
                    "record_stream_patched": "record_stream" in torch.Tensor.__dict__})
            """, capacity="4GiB")
        self.assertIn("required but it was not found", r["required"])
        self.assertIsNone(r["shim"])
        self.assertEqual(r["silent_ptr"], 0)  # the plain C ABI, as without the shim
        self.assertTrue(r["record_stream_patched"])


def main():
    if not torchsim.torch_installed():
        print("skipped: torch not installed (pip install -r requirements-torch.txt)")
        sys.exit(torchsim.SKIP_RETURN_CODE)
    if not SHIM or not os.path.isfile(SHIM):
        print("skipped: libcudacache_torch.so was not built (CMake found no PyTorch, or "
              "CUDACACHE_TORCH_SHIM=OFF); CUDACACHE_TORCH_SHIM names the built shim")
        sys.exit(torchsim.SKIP_RETURN_CODE)
    unittest.main(verbosity=2)


if __name__ == "__main__":
    main()
