# cmake --install BUILD --prefix P installs:
#   P/lib/libcudacache.so*, libcudacache_preload.so, libcudacache_torch.so (when built)
#   P/include/cudacache/   cudacache.h, cudacache.hpp, memory_stats.inc
#   P/include/cudasim/     cudasim.h (the simulator's test controls)
#   P/bin/                 cudacache-replay, cudasim-run
#   P/lib/cudacache/cudasim/  cudasim's libcudart.so.13, libcuda.so.1, libnvidia-ml.so.1: kept
#                          out of P/lib so that they never shadow NVIDIA's runtime; a program
#                          runs on them through cudasim-run or LD_LIBRARY_PATH
#   P/lib/cmake/cudacache/ the package: find_package(cudacache) gives cudacache::cudacache
#                          and cudacache::cudasim, and cudacache_CUDASIM_DIR
#   P/lib/pkgconfig/cudacache.pc
include(CMakePackageConfigHelpers)

set(CUDACACHE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/cudacache)
set(CUDACACHE_CUDASIM_INSTALLDIR ${CMAKE_INSTALL_LIBDIR}/cudacache/cudasim)

install(TARGETS cudacache EXPORT cudacacheTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
set_target_properties(cudasim_controls PROPERTIES EXPORT_NAME cudasim)
install(TARGETS cudasim_controls EXPORT cudacacheTargets)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/cudacache
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/tools/cudasim/include/cudasim.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cudasim)
install(TARGETS cudacache_preload LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET cudacache_torch)
  install(TARGETS cudacache_torch LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(TARGETS cudacache-replay cudacache-top RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS cudasim cudasim_driver cudasim_nvml
  LIBRARY DESTINATION ${CUDACACHE_CUDASIM_INSTALLDIR} NAMELINK_SKIP)
install(PROGRAMS ${PROJECT_BINARY_DIR}/tools/cudasim/cudasim-run
  DESTINATION ${CMAKE_INSTALL_BINDIR})

install(EXPORT cudacacheTargets NAMESPACE cudacache:: DESTINATION ${CUDACACHE_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/cudacacheConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cudacacheConfig.cmake
  INSTALL_DESTINATION ${CUDACACHE_INSTALL_CMAKEDIR}
  PATH_VARS CUDACACHE_CUDASIM_INSTALLDIR CMAKE_INSTALL_LIBDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cudacacheConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)  # 0.x: a minor version may break the API
install(FILES ${PROJECT_BINARY_DIR}/cudacacheConfig.cmake
  ${PROJECT_BINARY_DIR}/cudacacheConfigVersion.cmake
  DESTINATION ${CUDACACHE_INSTALL_CMAKEDIR})

# pkg-config: the C/C++ API for builds without CMake. The CUDA include directory is the one
# this build used (the headers include cuda_runtime_api.h).
# The prefix is found from the .pc file's own place, so an install with --prefix works.
list(GET CUDAToolkit_INCLUDE_DIRS 0 CUDACACHE_PC_CUDA_INCLUDEDIR)
file(RELATIVE_PATH CUDACACHE_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" CUDACACHE_PC_TO_PREFIX "${CUDACACHE_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/cudacache.pc.in
  ${PROJECT_BINARY_DIR}/cudacache.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cudacache.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
