"""Finding and loading libcudacache.so; the ctypes prototypes against the C header."""

import ctypes
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import support
import cudacache
from cudacache import _device, _library


def run_python(code, **env_changes):
    """Runs code in a fresh interpreter with the package importable; returns the result."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(support.PACKAGE_ROOT)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60)


def make_tree(root, files):
    for relative in files:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()


class ImportTest(unittest.TestCase):
    def test_import_loads_neither_library_nor_cuda_nor_torch(self):
        result = run_python(
            "import sys, cudacache, cudacache.torch\n"
            "maps = open('/proc/self/maps').read()\n"
            "print('libcudacache' in maps, 'libcudart' in maps, 'torch' in sys.modules,\n"
            "      cudacache.library_path())\n")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split(), ["False", "False", "False", "None"])

    def test_import_succeeds_and_first_use_fails_clearly_without_library(self):
        # A copy of the package outside the repository has no build tree to find.
        with tempfile.TemporaryDirectory() as temp:
            shutil.copytree(support.PACKAGE_ROOT / "cudacache", pathlib.Path(temp) / "cudacache",
                            ignore=shutil.ignore_patterns("__pycache__"))
            result = run_python(
                "import cudacache\n"
                "try:\n"
                "    cudacache.memory_allocated(0)\n"
                "except cudacache.LibraryNotFoundError as error:\n"
                "    print('ERROR', error)\n",
                CUDACACHE_LIBRARY=None, LD_LIBRARY_PATH=temp, PYTHONPATH=temp)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("ERROR cannot find libcudacache.so", result.stdout)
        self.assertIn("CUDACACHE_LIBRARY", result.stdout)
        self.assertIn(f"{temp}/cudacache/libcudacache.so: not found", result.stdout)
        self.assertIn("dynamic linker search", result.stdout)


class ExplicitPathTest(unittest.TestCase):
    def test_missing_file_is_an_error_naming_it(self):
        bogus = "/nonexistent/dir/libcudacache.so"
        with self.assertRaises(cudacache.LibraryNotFoundError) as caught:
            _library.load(environ={"CUDACACHE_LIBRARY": bogus})
        self.assertIn(f"CUDACACHE_LIBRARY={bogus}", str(caught.exception))
        self.assertEqual([str(path) for path, _ in caught.exception.searched], [bogus])

    def test_file_that_is_not_a_library_is_an_error_naming_it(self):
        with tempfile.NamedTemporaryFile(suffix=".so") as junk:
            junk.write(b"not an ELF file")
            junk.flush()
            with self.assertRaises(cudacache.LibraryNotFoundError) as caught:
                _library.load(environ={"CUDACACHE_LIBRARY": junk.name})
            self.assertIn(str(pathlib.Path(junk.name).resolve()), str(caught.exception))

    def test_library_without_the_symbols_is_rejected(self):
        with open("/proc/self/maps") as maps:
            libc = next(line.split()[-1] for line in maps if "/libc.so" in line)
        with self.assertRaises(cudacache.CudacacheError) as caught:
            _library.load(environ={"CUDACACHE_LIBRARY": libc})
        self.assertIn("does not export cudacache_malloc", str(caught.exception))

    def test_explicit_path_is_loaded(self):
        explicit = os.environ.get("CUDACACHE_LIBRARY")
        if not explicit:
            self.skipTest("CUDACACHE_LIBRARY not set (CTest sets it)")
        loaded = _library.load(environ={"CUDACACHE_LIBRARY": explicit})
        self.assertEqual(loaded.path, pathlib.Path(explicit).resolve())
        self.assertEqual(cudacache.load_library(), str(pathlib.Path(explicit).resolve()))
        self.assertEqual(cudacache.library_path(), str(pathlib.Path(explicit).resolve()))


class SearchOrderTest(unittest.TestCase):
    def test_build_tree_order_release_debug_then_by_name_skipping_sanitizers(self):
        with tempfile.TemporaryDirectory() as temp:
            repo = pathlib.Path(temp)
            make_tree(repo, ["CMakeLists.txt", "allocator/CMakeLists.txt",
                             "tools/python/cudacache/__init__.py"])
            for name in ("zeta", "asan", "debug", "alpha", "release"):
                (repo / "build" / name / "allocator").mkdir(parents=True)
            (repo / "build" / "asan" / "CMakeCache.txt").write_text(
                "CMAKE_BUILD_TYPE:STRING=Debug\nCUDACACHE_SANITIZE:STRING=address,undefined\n")
            (repo / "build" / "alpha" / "CMakeCache.txt").write_text(
                "CUDACACHE_SANITIZE:STRING=\n")
            candidates = _library.candidate_paths(repo / "tools/python/cudacache")
            build = [(path.parent.parent.name, note) for path, note in candidates
                     if repo / "build" in path.parents]
            self.assertEqual([name for name, _ in build],
                             ["release", "debug", "alpha", "asan", "zeta"])
            notes = dict(build)
            self.assertIn("CUDACACHE_SANITIZE=address,undefined", notes["asan"])
            self.assertIsNone(notes["alpha"])
            self.assertIsNone(notes["release"])
            # Next to the package comes first, install prefixes before the build tree.
            self.assertEqual(candidates[0][0], repo / "tools/python/cudacache/libcudacache.so")
            first_build = next(i for i, (p, _) in enumerate(candidates)
                               if repo / "build" in p.parents)
            self.assertTrue(all(p.name == "libcudacache.so" and p.parent.name in ("lib", "lib64")
                                for p, _ in candidates[1:first_build]))

    def test_package_outside_a_repository_has_no_build_candidates(self):
        with tempfile.TemporaryDirectory() as temp:
            package = pathlib.Path(temp) / "lib/python3.11/site-packages/cudacache"
            package.mkdir(parents=True)
            candidates = [path for path, _ in _library.candidate_paths(package)]
            self.assertIn(pathlib.Path(temp) / "lib/libcudacache.so", candidates)
            self.assertFalse(any("build" in path.parts for path in candidates))

    def test_install_prefix_is_found_without_configuration(self):
        real = support.library().path
        with tempfile.TemporaryDirectory() as temp:
            prefix = pathlib.Path(temp)
            package = prefix / "lib/python3.11/site-packages/cudacache"
            package.mkdir(parents=True)
            (prefix / "lib/libcudacache.so").symlink_to(real)
            loaded = _library.load(package_dir=package, environ={})
            self.assertEqual(loaded.path, real)

    def test_not_found_lists_every_place_in_order(self):
        with tempfile.TemporaryDirectory() as temp:
            package = pathlib.Path(temp) / "site-packages/cudacache"
            package.mkdir(parents=True)
            code = ("import pathlib, cudacache\nfrom cudacache import _library\n"
                    "try:\n"
                    f"    _library.load(package_dir=pathlib.Path({str(package)!r}), environ={{}})\n"
                    "except cudacache.LibraryNotFoundError as error:\n"
                    "    print(error)\n")
            result = run_python(code, LD_LIBRARY_PATH=temp)
            self.assertEqual(result.returncode, 0, result.stderr)
            lines = [line.strip() for line in result.stdout.splitlines()[1:]]
            expected = [str(path) for path, _ in _library.candidate_paths(package)]
            self.assertEqual([line.split(": ")[0] for line in lines[:-1]], expected)
            self.assertTrue(all(line.endswith("not found") for line in lines[:-1]))
            self.assertTrue(lines[-1].startswith("libcudacache.so (dynamic linker search)"))


class DeviceArgumentTest(unittest.TestCase):
    class FakeTorchDevice:
        """Stands in for torch.device: only .type and .index are used."""

        def __init__(self, type_, index):
            self.type, self.index = type_, index

    def test_accepted_forms(self):
        current = _device.CURRENT_DEVICE
        self.assertEqual(current, -1)
        self.assertEqual(cudacache.device_index(None), current)
        self.assertEqual(cudacache.device_index(1), 1)
        self.assertEqual(cudacache.device_index("cuda"), current)
        self.assertEqual(cudacache.device_index("cuda:2"), 2)
        self.assertEqual(cudacache.device_index(self.FakeTorchDevice("cuda", 3)), 3)
        self.assertEqual(cudacache.device_index(self.FakeTorchDevice("cuda", None)), current)

    def test_rejected_forms(self):
        with self.assertRaises(ValueError):
            cudacache.device_index(self.FakeTorchDevice("cpu", None))
        with self.assertRaises(ValueError):
            cudacache.device_index("cpu")
        with self.assertRaises(ValueError):
            cudacache.device_index(-2)
        with self.assertRaises(TypeError):
            cudacache.device_index(True)
        with self.assertRaises(TypeError):
            cudacache.device_index(1.5)


# C type spellings of cudacache.h -> the ctypes type the package must use.
C_TYPES = {
    "void": None,
    "void*": ctypes.c_void_p,
    "void**": ctypes.POINTER(ctypes.c_void_p),
    "const char*": ctypes.c_char_p,
    "char*": ctypes.c_char_p,
    "int": ctypes.c_int,
    "size_t": ctypes.c_size_t,
    "ssize_t": ctypes.c_ssize_t,
    "cudaStream_t": ctypes.c_void_p,
    "cudacache_status": ctypes.c_int,
    "cudacache_retry_hook": _library.RETRY_HOOK_FN,
    "unsigned": ctypes.c_uint,
    "cudacache_stacks": ctypes.c_int,  # an enum
    "cudacache_python_frames_provider": ctypes.c_void_p,  # passed as the function's address
}


def header_prototypes(text):
    """{name: (return type, [parameter types])} of every CUDACACHE_API function."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    prototypes = {}
    for match in re.finditer(r"CUDACACHE_API\s+([^;]*?)\b(cudacache_\w+)\s*\(([^)]*)\)\s*;",
                             text, flags=re.S):
        result = " ".join(match.group(1).split()).replace(" *", "*")
        params = []
        for param in match.group(3).split(","):
            param = " ".join(param.split())
            if param in ("void", ""):
                continue
            type_ = re.sub(r"\s*\b\w+$", "", param)  # drop the parameter name
            params.append(type_.replace(" *", "*"))
        prototypes[match.group(2)] = (result, params)
    return prototypes


class HeaderTest(unittest.TestCase):
    def test_prototypes_match_the_c_header(self):
        header = support.REPO / "include/cudacache/cudacache.h"
        declared = header_prototypes(header.read_text())
        self.assertIn("cudacache_malloc", declared)
        for name, (restype, argtypes) in _library.PROTOTYPES.items():
            with self.subTest(function=name):
                self.assertIn(name, declared, f"{name} is not in cudacache.h")
                c_result, c_params = declared[name]
                self.assertIs(C_TYPES[c_result], restype, f"{name} returns {c_result}")
                self.assertEqual([C_TYPES[p] for p in c_params], argtypes,
                                 f"{name} takes {c_params}")

    def test_oom_context_matches_the_c_struct(self):
        header = (support.REPO / "include/cudacache/cudacache.h").read_text()
        body = re.search(r"typedef struct cudacache_oom_context \{(.*?)\}", header, re.S).group(1)
        fields = re.findall(r"^\s*([\w ]+?\*?)\s*(\w+);", body, re.M)
        self.assertEqual([(name, C_TYPES[type_.replace(" *", "*")]) for type_, name in fields],
                         list(_library.OomContext._fields_))

    def test_version_is_the_headers_and_the_librarys(self):
        import cudacache
        header = (support.REPO / "include/cudacache/cudacache.h").read_text()
        version = re.search(r'#define CUDACACHE_VERSION_STRING "([^"]+)"', header).group(1)
        self.assertEqual(cudacache.__version__, version)
        self.assertEqual(support.library().function("cudacache_version")().decode(), version)

    def test_exported_symbols_exist(self):
        lib = support.library()
        for name in _library.PROTOTYPES:
            with self.subTest(function=name):
                self.assertTrue(lib.has(name), f"{lib.path} does not export {name}")


if __name__ == "__main__":
    unittest.main()
