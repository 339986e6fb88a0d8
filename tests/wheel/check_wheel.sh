#!/usr/bin/env bash
# pip install . as a Python user does it: a fresh virtual environment (with the system's
# site-packages, for PyTorch), `pip install SOURCE` (an isolated build by scikit-build-core),
# then, from outside the source tree and with no cudacache variable set: the package's
# version, the bundled libraries, the libtorch shim found by install() on its own, the plain
# C ABI, and the shim's test file on cudasim against the installed package (its own cudasim
# libraries).
# Exits 77 (skipped) without PyTorch or without the Python package index.
#   check_wheel.sh SOURCE_DIR WORK_DIR PYTHON
set -euo pipefail
source_dir=$1 work=$2 python=$3
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "skipped: torch not installed (pip install -r requirements-torch.txt)"; exit 77
fi
rm -rf "$work"
mkdir -p "$work"
"$python" -m venv --system-site-packages "$work/venv"
venv_python="$work/venv/bin/python"
if ! "$venv_python" -m pip download -q --no-deps -d "$work/probe" "scikit-build-core>=0.10" \
    >/dev/null 2>&1; then
  echo "skipped: the Python package index is not reachable (scikit-build-core)"; exit 77
fi
unset CUDACACHE_LIBRARY CUDACACHE_TORCH_SHIM PYTHONPATH CUDACACHE_CONF
"$venv_python" -m pip install -q "$source_dir"

cd "$work"
package=$("$venv_python" -c "import cudacache, os; print(os.path.dirname(cudacache.__file__))")
case "$package" in
  "$work"/venv/*) ;;
  *) echo "FAIL: cudacache imported from $package, not the virtual environment"; exit 1 ;;
esac
for file in libcudacache.so libcudacache_torch.so libcudacache_preload.so \
            cudasim/libcudart.so.13 cudasim/libcuda.so.1 cudasim/libnvidia-ml.so.1 cudasim/cudasim-run \
            memory_page.html; do
  [ -e "$package/$file" ] || { echo "FAIL: the wheel has no $file"; exit 1; }
done
# render_html() finds its page template inside the installed package.
"$venv_python" -c 'import cudacache; assert "memory-data" in cudacache.render_html(None, {"segments": [], "device_traces": [[]]})'
header_version=$(sed -n 's/^#define CUDACACHE_VERSION_STRING "\(.*\)"/\1/p' \
                 "$source_dir/include/cudacache/cudacache.h")

export CUDASIM_DIR="$package/cudasim" TORCHSIM_INSTALLED=1 PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$source_dir/tests/torch"
# install() finds the bundled library and shim by itself; an OOM is torch.OutOfMemoryError.
# Then the plain C ABI (CUDACACHE_TORCH_SHIM=0) of the same package: the tree's tests of that
# path (tests/torch) are not run again here, to keep CI within its time.
"$venv_python" - "$header_version" "$package" <<'PY'
import sys
import torchsim
version, package = sys.argv[1], sys.argv[2]
result = torchsim.run_scenario("""
    import warnings
    import cudacache, cudacache.torch
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "not using the shim" warning
        cudacache.torch.install(patch=False)
    x = torch.empty(1 << 20, device="cuda")
    try:
        torch.empty(1 << 40, device="cuda")
        oom = "none"
    except torch.OutOfMemoryError:
        oom = "torch.OutOfMemoryError"
    report({"version": cudacache.__version__, "library": str(cudacache.load_library()),
            "shim": str(cudacache.torch.shim_path()), "oom": oom,
            "allocated": cudacache.memory_allocated(0)})
""", capacity="1GiB")
print(result)
assert result["version"] == version, result
assert result["library"].startswith(package), result
assert result["shim"].startswith(package), result
assert result["oom"] == "torch.OutOfMemoryError", result
assert result["allocated"] == 4 << 20, result

plain = torchsim.run_scenario("""
    import cudacache, cudacache.torch
    cudacache.torch.install(patch=False)
    x = torch.empty(1 << 20, device="cuda")
    silent = torch.empty(1 << 40, device="cuda")  # the plain ABI cannot raise: a NULL tensor
    try:
        with cudacache.torch.raise_on_oom():
            torch.empty(1 << 40, device="cuda")
        oom = "none"
    except torch.OutOfMemoryError as e:
        oom = type(e).__name__ if isinstance(e, cudacache.OutOfMemoryError) else "untyped"
    report({"library": str(cudacache.load_library()), "shim": cudacache.torch.shim_path(),
            "silent": silent.data_ptr(), "oom": oom,
            "allocated": cudacache.memory_allocated(0)})
""", capacity="1GiB", extra={"CUDACACHE_TORCH_SHIM": "0"})
print(plain)
assert plain["library"].startswith(package), plain
assert plain["shim"] is None, plain
assert plain["silent"] == 0, plain
assert plain["oom"] == "OutOfMemoryError", plain
assert plain["allocated"] == 4 << 20, plain
PY

# The shim's test file, against the shim pip built (against this Python's PyTorch).
cd "$source_dir/tests/torch"
CUDACACHE_TORCH_SHIM="$package/libcudacache_torch.so" "$venv_python" test_torch_shim.py
echo "wheel ok: cudacache $header_version in $package"
