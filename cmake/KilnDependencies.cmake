# Finds OpenMP, oneDNN, the CUDA toolkit and MPI, honouring KILN_WITH_ONEDNN, KILN_WITH_CUDA and
# KILN_WITH_MPI.
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
# zlib reads gzip-compressed IDX files (the MNIST format).
find_package(ZLIB REQUIRED)

set(KILN_HAVE_ONEDNN OFF)
if(NOT KILN_WITH_ONEDNN STREQUAL "OFF")
  # Either Debian's libdnnl-dev or a oneDNN install pointed to by DNNL_ROOT / CMAKE_PREFIX_PATH.
  # Debian's dnnl-config.cmake calls find_package(OpenCL REQUIRED), which stops the configure step
  # where the OpenCL headers are missing; then oneDNN's header and library are found directly.
  find_file(KILN_DNNL_CONFIG NAMES dnnl-config.cmake DNNLConfig.cmake
            PATH_SUFFIXES lib/cmake/dnnl lib64/cmake/dnnl lib/x86_64-linux-gnu/cmake/dnnl
            HINTS ${DNNL_ROOT} ${dnnl_DIR})
  set(_kiln_dnnl_config_usable ON)
  if(KILN_DNNL_CONFIG)
    file(READ "${KILN_DNNL_CONFIG}" _kiln_dnnl_config_text)
    if(_kiln_dnnl_config_text MATCHES "DNNL_GPU_RUNTIME \"OCL\"")
      find_package(OpenCL QUIET)
      if(NOT OpenCL_FOUND)
        set(_kiln_dnnl_config_usable OFF)
        message(STATUS "Kiln: oneDNN's CMake config (${KILN_DNNL_CONFIG}) needs the OpenCL headers "
                       "(apt-get install ocl-icd-opencl-dev opencl-headers); finding dnnl.hpp and libdnnl directly")
      endif()
    endif()
  endif()
  if(_kiln_dnnl_config_usable)
    find_package(dnnl CONFIG QUIET)
  endif()
  if(TARGET DNNL::dnnl)
    set(KILN_DNNL_TARGET DNNL::dnnl)
    set(KILN_HAVE_ONEDNN ON)
  else()
    find_path(KILN_DNNL_INCLUDE oneapi/dnnl/dnnl.hpp HINTS ${DNNL_ROOT}/include)
    find_library(KILN_DNNL_LIB NAMES dnnl HINTS ${DNNL_ROOT}/lib)
    if(KILN_DNNL_INCLUDE AND KILN_DNNL_LIB)
      add_library(kiln_dnnl INTERFACE)
      target_include_directories(kiln_dnnl INTERFACE ${KILN_DNNL_INCLUDE})
      target_link_libraries(kiln_dnnl INTERFACE ${KILN_DNNL_LIB})
      set(KILN_DNNL_TARGET kiln_dnnl)
      set(KILN_HAVE_ONEDNN ON)
    endif()
  endif()
  if(KILN_WITH_ONEDNN STREQUAL "ON" AND NOT KILN_HAVE_ONEDNN)
    message(FATAL_ERROR "KILN_WITH_ONEDNN=ON but oneDNN was not found (apt-get install libdnnl-dev)")
  endif()
  if(NOT KILN_HAVE_ONEDNN)
    # Not an error (a GPU machine may have no oneDNN), but not something to miss either.
    message(WARNING "Kiln: oneDNN was not found: CPU convolutions and matmuls will run on Kiln's own "
                    "loops, many times slower. apt-get install libdnnl-dev (or scripts/install-deps.sh), "
                    "then configure again; -DKILN_WITH_ONEDNN=OFF says that this is meant.")
  endif()
endif()
message(STATUS "Kiln: oneDNN ${KILN_HAVE_ONEDNN}")

set(KILN_HAVE_CUDA OFF)
set(KILN_HAVE_CUDNN OFF)
if(NOT KILN_WITH_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  include(CheckLanguage)
  check_language(CUDA)
  if(CUDAToolkit_FOUND AND TARGET CUDA::cublasLt AND CMAKE_CUDA_COMPILER)
    set(KILN_HAVE_CUDA ON)
  elseif(KILN_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KILN_WITH_CUDA=ON but the CUDA toolkit (nvcc and cuBLASLt) was not found")
  endif()
endif()
# The folder of an NVIDIA wheel's package (nvidia.cudnn, nvidia.nccl) in python3's site-packages,
# or "". These are namespace packages (no __init__.py, so no __file__): their __path__ names it.
function(kiln_wheel_dir module out)
  execute_process(COMMAND python3 -c "import ${module} as m; print(list(m.__path__)[0])"
                  OUTPUT_VARIABLE dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  set(${out} "${dir}" PARENT_SCOPE)
endfunction()

if(KILN_HAVE_CUDA)
  # By default sm_90 code and its PTX (the H100/H200, and newer GPUs through the PTX), plus machine
  # code for each other GPU this machine has that nvcc can build for (as a PyTorch source build
  # does); -DKILN_CUDA_ARCHITECTURES="80;90" chooses (quoted: a shell ends the command at an
  # unquoted ';'). A GPU the build has no code for is refused with that hint at run time.
  if(NOT DEFINED CACHE{KILN_CUDA_ARCHITECTURES})
    set(kiln_archs 90)
    find_program(KILN_NVIDIA_SMI nvidia-smi)
    if(KILN_NVIDIA_SMI)
      execute_process(COMMAND ${KILN_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
                      OUTPUT_VARIABLE kiln_caps RESULT_VARIABLE kiln_smi ERROR_QUIET)
      execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --list-gpu-code OUTPUT_VARIABLE kiln_nvcc_codes ERROR_QUIET)
      if(kiln_smi EQUAL 0)
        string(REGEX MATCHALL "[0-9]+\\.[0-9]+" kiln_caps "${kiln_caps}")
        foreach(cap IN LISTS kiln_caps)
          string(REPLACE "." "" cc "${cap}")
          string(REGEX MATCH "sm_${cc}\n" known "${kiln_nvcc_codes}\n")
          if(known AND NOT cc EQUAL 90)
            list(APPEND kiln_archs "${cc}-real")
          endif()
        endforeach()
        list(REMOVE_DUPLICATES kiln_archs)
      endif()
    endif()
    message(STATUS "Kiln: CUDA architectures ${kiln_archs}")
  endif()
  set(KILN_CUDA_ARCHITECTURES "${kiln_archs}" CACHE STRING "CUDA architectures to build for (CMAKE_CUDA_ARCHITECTURES)")
  set(CMAKE_CUDA_ARCHITECTURES ${KILN_CUDA_ARCHITECTURES})
  enable_language(CUDA)
  # C++20 as the rest of Kiln: CMake 3.25 does not know nvcc's flag for it, so it is named here.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  # cuDNN (convolutions, fused attention) is optional: the toolkit's copy, CUDNN_ROOT, or the one
  # inside PyTorch's nvidia-cudnn wheel (GPU machines often have only that).
  kiln_wheel_dir(nvidia.cudnn KILN_WHEEL_CUDNN)
  find_path(KILN_CUDNN_INCLUDE cudnn.h HINTS $ENV{CUDNN_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS} ${KILN_WHEEL_CUDNN}/include
            /usr/local/include)
  find_library(KILN_CUDNN_LIB NAMES cudnn libcudnn.so.9 HINTS $ENV{CUDNN_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR}
               ${KILN_WHEEL_CUDNN}/lib)
  if(KILN_CUDNN_INCLUDE AND KILN_CUDNN_LIB)
    set(KILN_HAVE_CUDNN ON)
  endif()
endif()
message(STATUS "Kiln: CUDA ${KILN_HAVE_CUDA} (cuDNN ${KILN_HAVE_CUDNN})")

# MPI (Debian's OpenMPI: libopenmpi-dev, openmpi-bin) carries kiln::distributed between processes.
set(KILN_HAVE_MPI OFF)
if(NOT KILN_WITH_MPI STREQUAL "OFF")
  # The C API from C++ (no MPI C++ bindings).
  set(MPI_CXX_SKIP_MPICXX ON)
  find_package(MPI QUIET COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(KILN_HAVE_MPI ON)
  elseif(KILN_WITH_MPI STREQUAL "ON")
    message(FATAL_ERROR "KILN_WITH_MPI=ON but MPI was not found (apt-get install libopenmpi-dev openmpi-bin)")
  endif()
endif()
message(STATUS "Kiln: MPI ${KILN_HAVE_MPI}")

# NCCL carries kiln::distributed's CUDA tensors GPU to GPU (its unique id goes over MPI): the
# toolkit's copy or the one in PyTorch's nvidia-nccl wheel. Without it they go through host memory.
# Built with CUDA even without MPI: a GPU check machine without MPI still tests it on one GPU.
set(KILN_HAVE_NCCL OFF)
if(KILN_HAVE_CUDA)
  kiln_wheel_dir(nvidia.nccl KILN_WHEEL_NCCL)
  find_path(KILN_NCCL_INCLUDE nccl.h HINTS $ENV{NCCL_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS} ${KILN_WHEEL_NCCL}/include)
  find_library(KILN_NCCL_LIB NAMES nccl libnccl.so.2 HINTS $ENV{NCCL_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR}
               ${KILN_WHEEL_NCCL}/lib)
  if(KILN_NCCL_INCLUDE AND KILN_NCCL_LIB)
    set(KILN_HAVE_NCCL ON)
  endif()
endif()
message(STATUS "Kiln: NCCL ${KILN_HAVE_NCCL}")
