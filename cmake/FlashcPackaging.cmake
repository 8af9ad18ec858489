# Install rules of flashc, included at the end of the root CMakeLists.txt
# (after src/cuda, so that the flashc_cuda target exists when it is built).
#
# Two layouts:
#  - A Python build (SKBUILD is set by scikit-build-core: `pip install .`,
#    `pip wheel .`): libflashc.so and libflashc_cuda.so go into the flashc
#    package directory, next to python/flashc/*.py, where flashc/_lib.py looks
#    first. Nothing else: the wheel carries no header or CMake files.
#  - A C install (`cmake --install build --prefix P`):
#      P/lib/libflashc.so{,.0,.0.X.Y}    the library (SOVERSION 0)
#      P/lib/libflashc_cuda.so           the CUDA module, next to the library:
#                                        the core dlopen()s it from its own
#                                        directory (src/cuda_loader.c)
#      P/include/flashc.h                the whole ABI
#      P/lib/cmake/flashc/               find_package(flashc CONFIG) -> flashc::flashc
#      P/lib/pkgconfig/flashc.pc         pkg-config flashc
#    (lib is CMAKE_INSTALL_LIBDIR: lib64 or lib/<triplet> on some systems.)

if(SKBUILD)
  # scikit-build-core sets the install prefix to the wheel's platlib root.
  if(NOT SKBUILD_PROJECT_VERSION STREQUAL PROJECT_VERSION)
    message(FATAL_ERROR "flashc: pyproject version ${SKBUILD_PROJECT_VERSION} != "
                        "CMake version ${PROJECT_VERSION} (both come from include/flashc.h)")
  endif()
  install(TARGETS flashc LIBRARY DESTINATION flashc COMPONENT python)
  if(TARGET flashc_cuda)
    install(TARGETS flashc_cuda LIBRARY DESTINATION flashc COMPONENT python)
  endif()
  return()
endif()

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
set(FLASHC_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/flashc CACHE STRING
    "Where flashcConfig.cmake is installed, relative to the prefix")

install(TARGETS flashc EXPORT flashcTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET flashc_cuda)
  # A MODULE, loaded at run time: not part of the export set, nobody links it.
  install(TARGETS flashc_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
endif()
install(FILES ${PROJECT_SOURCE_DIR}/include/flashc.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)

# The CMake package. libflashc links OpenMP, libm and libdl privately and is
# shared, so consumers need no find_dependency().
install(EXPORT flashcTargets NAMESPACE flashc:: FILE flashcTargets.cmake
        DESTINATION ${FLASHC_INSTALL_CMAKEDIR} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/flashcConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/flashcConfig.cmake
                              INSTALL_DESTINATION ${FLASHC_INSTALL_CMAKEDIR})
# The ABI is append-only within SOVERSION 0 (params carry struct_size), so
# any 0.y >= the requested one serves.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/flashcConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/flashcConfig.cmake ${PROJECT_BINARY_DIR}/flashcConfigVersion.cmake
        DESTINATION ${FLASHC_INSTALL_CMAKEDIR} COMPONENT dev)

# pkg-config: paths relative to the .pc file (${pcfiledir}), so the prefix
# given to `cmake --install --prefix` at install time is honoured and the
# tree can be moved. lib/pkgconfig -> ../.. is the prefix.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(FLASHC_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  string(REGEX REPLACE "[^/]+" ".." _flashc_pc_up "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
  set(FLASHC_PC_PREFIX "\${pcfiledir}/${_flashc_pc_up}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(FLASHC_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(FLASHC_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(FLASHC_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(FLASHC_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/flashc.pc.in ${PROJECT_BINARY_DIR}/flashc.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/flashc.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
