"""A Python program that loads the CUDA runtime privately, as ctypes and `import torch` do
(RTLD_LOCAL: invisible to dlsym(RTLD_NEXT)), and allocates through it.

Usage: ctypes_program.py PATH_TO_LIBCUDART [ROUNDS]
Prints one line "rounds=N checksum=X"; the same with and without the preload.
"""
import ctypes
import sys

cudaMemcpyHostToDevice = 1
cudaMemcpyDeviceToHost = 2


def main():
    path = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    cudart = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    for name in ("cudaMalloc", "cudaFree", "cudaMemcpy"):
        getattr(cudart, name).restype = ctypes.c_int
    cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    cudart.cudaFree.argtypes = [ctypes.c_void_p]
    cudart.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

    checksum = 0
    state = 12345
    for i in range(rounds):
        state = (state * 1103515245 + 12345) % (1 << 31)
        size = 256 + state % (2 << 20)
        ptr = ctypes.c_void_p()
        if cudart.cudaMalloc(ctypes.byref(ptr), size) != 0:
            print("FAIL: cudaMalloc")
            return 1
        data = bytes((state + k) % 256 for k in range(64))
        out = ctypes.create_string_buffer(data, 64)
        back = ctypes.create_string_buffer(64)
        if (cudart.cudaMemcpy(ptr.value + size - 64, out, 64, cudaMemcpyHostToDevice) != 0 or
                cudart.cudaMemcpy(back, ptr.value + size - 64, 64, cudaMemcpyDeviceToHost) != 0):
            print("FAIL: cudaMemcpy")
            return 1
        checksum = (checksum * 31 + sum(back.raw)) % (1 << 61)
        if cudart.cudaFree(ptr) != 0:
            print("FAIL: cudaFree")
            return 1
    print(f"rounds={rounds} checksum={checksum}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
