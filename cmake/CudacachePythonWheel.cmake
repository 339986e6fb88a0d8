# pip install . (pyproject.toml, scikit-build-core): the libraries go inside the Python
# package, where cudacache._library finds them first (and cudacache.torch the shim next to
# libcudacache.so): site-packages/cudacache/
#   libcudacache.so, libcudacache_torch.so (when PyTorch was found), libcudacache_preload.so
#   cudasim/  libcudart.so.13, libcuda.so.1, libnvidia-ml.so.1, cudasim-run
#   memory_page.html (the page template of render_html)
# libcudacache.so has no version suffix here (SONAME libcudacache.so): a wheel holds files,
# not symlinks.
add_custom_target(cudacache_python ALL)
add_dependencies(cudacache_python cudacache cudacache_preload cudasim cudasim_driver cudasim_nvml)
set(python_libraries cudacache cudacache_preload)
if(TARGET cudacache_torch)
  add_dependencies(cudacache_python cudacache_torch)
  list(APPEND python_libraries cudacache_torch)
  message(STATUS "python wheel: with the libtorch shim")
else()
  message(STATUS "python wheel: WITHOUT the libtorch shim (no PyTorch found for ${Python3_EXECUTABLE})")
endif()
install(TARGETS ${python_libraries} LIBRARY DESTINATION cudacache COMPONENT python)
install(TARGETS cudasim cudasim_driver cudasim_nvml
  LIBRARY DESTINATION cudacache/cudasim NAMELINK_SKIP COMPONENT python)
install(PROGRAMS ${PROJECT_BINARY_DIR}/tools/cudasim/cudasim-run
  DESTINATION cudacache/cudasim COMPONENT python)
# cudacache.render_html() draws with the page cudacache-replay --html embeds.
install(FILES ${PROJECT_SOURCE_DIR}/tools/html/memory_page.html
  DESTINATION cudacache COMPONENT python)
