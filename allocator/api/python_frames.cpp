// cudacache_python_frames: the Python frames provider (cudacache.h) that the Python package
// registers for stacks="python"/"all" and the growth detector.
//
// It walks the calling thread's frames through CPython's public C API, found in the process at
// run time (dlsym), so libcudacache neither links libpython nor needs its headers, and a
// process without a Python interpreter gets no frames rather than a load failure. It is called
// before cudacache takes a lock of its own (stack_table.h), so waiting here for the GIL cannot
// deadlock against another thread inside cudacache.
#include <cudacache/cudacache.h>

#include <dlfcn.h>

namespace {

// CPython's types as opaque pointers; PyGILState_STATE is an enum (an int).
using PyObjectPtr = void*;

struct PythonApi {
  int (*is_initialized)() = nullptr;
  int (*is_finalizing)() = nullptr;  // Py_IsFinalizing (3.13) or _Py_IsFinalizing (3.7 - 3.12)
  int (*gil_ensure)() = nullptr;
  void (*gil_release)(int) = nullptr;
  PyObjectPtr (*current_frame)() = nullptr;                     // PyEval_GetFrame: borrowed
  PyObjectPtr (*frame_back)(PyObjectPtr) = nullptr;             // PyFrame_GetBack: new reference
  PyObjectPtr (*frame_code)(PyObjectPtr) = nullptr;             // PyFrame_GetCode: new reference
  int (*frame_line)(PyObjectPtr) = nullptr;                     // PyFrame_GetLineNumber
  PyObjectPtr (*get_attr)(PyObjectPtr, const char*) = nullptr;  // new reference
  const char* (*utf8)(PyObjectPtr) = nullptr;                   // PyUnicode_AsUTF8: borrowed
  void (*decref)(PyObjectPtr) = nullptr;                        // Py_DecRef
  void (*clear_error)() = nullptr;                              // PyErr_Clear

  bool complete() const {
    return is_initialized && is_finalizing && gil_ensure && gil_release && current_frame &&
           frame_back && frame_code && frame_line && get_attr && utf8 && decref && clear_error;
  }
};

template <typename Function>
void find(Function* out, const char* name) {
  *out = reinterpret_cast<Function>(dlsym(RTLD_DEFAULT, name));
}

const PythonApi* python_api() {
  // Looked up on every call until an interpreter is there (a library may be loaded before
  // Python initializes), then kept.
  static const PythonApi* found = nullptr;
  if (found != nullptr) return found;
  static PythonApi api;
  find(&api.is_initialized, "Py_IsInitialized");
  find(&api.is_finalizing, "Py_IsFinalizing");
  if (api.is_finalizing == nullptr) find(&api.is_finalizing, "_Py_IsFinalizing");
  find(&api.gil_ensure, "PyGILState_Ensure");
  find(&api.gil_release, "PyGILState_Release");
  find(&api.current_frame, "PyEval_GetFrame");
  find(&api.frame_back, "PyFrame_GetBack");
  find(&api.frame_code, "PyFrame_GetCode");
  find(&api.frame_line, "PyFrame_GetLineNumber");
  find(&api.get_attr, "PyObject_GetAttrString");
  find(&api.utf8, "PyUnicode_AsUTF8");
  find(&api.decref, "Py_DecRef");
  find(&api.clear_error, "PyErr_Clear");
  if (!api.complete()) return nullptr;
  found = &api;
  return found;
}

// The string attribute `name` of a code object, or "??".
const char* code_text(const PythonApi& api, PyObjectPtr code, const char* name, PyObjectPtr* keep) {
  *keep = api.get_attr(code, name);
  const char* text = *keep != nullptr ? api.utf8(*keep) : nullptr;
  if (text == nullptr) {
    api.clear_error();
    return "??";
  }
  return text;
}

}  // namespace

extern "C" void cudacache_python_frames(cudacache_frame_sink emit, void* sink) {
  if (emit == nullptr) return;
  const PythonApi* api = python_api();
  // No interpreter, or one shutting down (its threads must not take the GIL then).
  if (api == nullptr || api->is_initialized() == 0 || api->is_finalizing() != 0) return;
  const int gil = api->gil_ensure();
  PyObjectPtr frame = api->current_frame();
  PyObjectPtr owned = nullptr;  // the frames from frame_back are ours to release
  while (frame != nullptr) {
    PyObjectPtr code = api->frame_code(frame);
    if (code != nullptr) {
      PyObjectPtr name_object = nullptr;
      PyObjectPtr file_object = nullptr;
      const char* name = code_text(*api, code, "co_name", &name_object);
      const char* filename = code_text(*api, code, "co_filename", &file_object);
      emit(sink, name, filename, api->frame_line(frame));
      if (name_object != nullptr) api->decref(name_object);
      if (file_object != nullptr) api->decref(file_object);
      api->decref(code);
    }
    PyObjectPtr back = api->frame_back(frame);
    if (owned != nullptr) api->decref(owned);
    owned = back;
    frame = back;
  }
  api->gil_release(gil);
}
