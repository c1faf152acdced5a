# The SMPI build: mesh/ and the programs that need only it (meshbench, the tests of tests/smpi),
# and the dry-run trainer (train/'s step over FLOP-count kernels), compiled with SimGrid's smpicc,
# to run as simulated ranks under smpirun (bench/simpod). Use a build tree of its own:
#   cmake -S . -B build-smpi -DMESHTRAIN_SMPI=ON && cmake --build build-smpi
# Included twice from the top CMakeLists.txt: before project() it picks smpicc as the C compiler
# (MT_SMPI_PHASE = compiler); after it (MT_SMPI_PHASE = targets) it defines the targets. Where
# SimGrid is not installed the tree configures with nothing to build and says so.
#
# What the SMPI build leaves out or replaces (docs/simpod.md says why):
#  - non-blocking collectives run on a coroutine of the caller's actor, not a progress thread (a
#    simulated rank may call MPI from its own actor only; mesh/sim_progress.c);
#  - link emulation (--emulate, --link) is off: the simulated platform's links are the links;
#  - the watchdog thread is off;
#  - HDF5 (data/ but paths.c, lockfile.c, linefile.c and tokens_order.c, ckpt/, infer/, cli/) is
#    not built: parallel HDF5 links Open MPI; BLAS (kernels/) is replaced by
#    bench/simpod_kernels.c, which charges each kernel's FLOPs to the simulated clock.
if(MT_SMPI_PHASE STREQUAL "compiler")
  find_program(MT_SMPICC smpicc)
  find_program(MT_SMPIRUN smpirun)
  if(MT_SMPICC AND MT_SMPIRUN)
    set(CMAKE_C_COMPILER ${MT_SMPICC} CACHE FILEPATH "SimGrid's smpicc" FORCE)
    set(MT_SMPI_FOUND TRUE)
  else()
    set(MT_SMPI_FOUND FALSE)
  endif()
  return()
endif()

if(NOT MT_SMPI_FOUND)
  message(WARNING "MESHTRAIN_SMPI=ON but SimGrid's smpicc/smpirun were not found: nothing to "
                  "build in this tree (Debian 12: apt-get install libsimgrid-dev)")
  return()
endif()
message(STATUS "SMPI build with ${MT_SMPICC}; run the programs with bench/simpod")

# smpicc supplies SMPI's mpi.h and links libsimgrid: MPI::MPI_C carries only the marker that
# switches mesh/ to its SMPI variants.
add_library(MPI::MPI_C INTERFACE IMPORTED)
set_target_properties(MPI::MPI_C PROPERTIES INTERFACE_COMPILE_DEFINITIONS MESHTRAIN_SMPI=1)
# the bf16 conversions of mesh/'s bf16 wire (kernels/bf16.c, a leaf): the real ones
add_library(mt_bf16 STATIC kernels/bf16.c)
target_include_directories(mt_bf16 PUBLIC ${PROJECT_SOURCE_DIR})
mt_target_warnings(mt_bf16)
add_subdirectory(mesh)

# its output files' checks, locks and whole lines: data/'s POSIX-only modules (no HDF5)
add_executable(meshbench bench/meshbench.c data/paths.c data/lockfile.c data/linefile.c)
target_include_directories(meshbench PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(meshbench PRIVATE mt_mesh MPI::MPI_C) # MPI::MPI_C: the MESHTRAIN_SMPI marker
mt_target_warnings(meshbench)

# The platform generator and the re-predictor of meshbench CSVs run on the host, not in the
# simulator: they are built with the host's C compiler (an smpicc output is a shared object that
# only smpirun loads). Both read mesh/cost.c, so the simulated links are the cost model's chip.
find_program(MT_HOST_CC NAMES cc gcc REQUIRED)
foreach(tool simpod_platform simpod_predict)
  string(REPLACE "_" "-" exe ${tool})
  add_custom_command(
    OUTPUT ${PROJECT_BINARY_DIR}/${exe}
    COMMAND ${MT_HOST_CC} -std=c11 -O2 -Wall -Wextra -Wshadow -I${PROJECT_SOURCE_DIR}
            ${PROJECT_SOURCE_DIR}/bench/${tool}.c ${PROJECT_SOURCE_DIR}/mesh/cost.c
            ${PROJECT_SOURCE_DIR}/mesh/errmsg.c ${PROJECT_SOURCE_DIR}/mesh/names.c -lm
            -o ${PROJECT_BINARY_DIR}/${exe}
    DEPENDS ${PROJECT_SOURCE_DIR}/bench/${tool}.c ${PROJECT_SOURCE_DIR}/mesh/cost.c
            ${PROJECT_SOURCE_DIR}/mesh/cost.h ${PROJECT_SOURCE_DIR}/mesh/errmsg.c
            ${PROJECT_SOURCE_DIR}/mesh/names.c
    COMMENT "Building the host tool ${exe}")
  add_custom_target(${tool} ALL DEPENDS ${PROJECT_BINARY_DIR}/${exe})
endforeach()

# The tests that tests/smpi runs under smpirun: the MPI build's collective test (unchanged but for
# the bound on its non-blocking test's compute, in simulated time under SMPI), the
# simulated links against the chip table, and the non-blocking collectives' overlap of simulated
# compute.
foreach(t mesh/test_coll smpi/test_simlink smpi/test_simlap)
  get_filename_component(name ${t} NAME)
  add_executable(${name} tests/${t}.c tests/mesh/mesh_args.c)
  target_link_libraries(${name} PRIVATE mt_mesh)
  mt_target_warnings(${name})
endforeach()
# their shared command line (--mesh, --open, --chip, --alg)
target_sources(test_simlink PRIVATE tests/smpi/smpi_opts.c)
target_sources(test_simlap PRIVATE tests/smpi/smpi_opts.c)
target_link_libraries(test_simlap PRIVATE MPI::MPI_C) # mesh_sim_compute: the MESHTRAIN_SMPI marker
target_link_libraries(test_coll PRIVATE MPI::MPI_C) # its non-blocking test's bound: simulated time

# The dry-run trainer (bench/simpod_dryrun.c): train/'s config, observe, model, parallel and step
# libraries, compiled by smpicc unchanged, over mt_kernels = the FLOP-count backend
# (bench/simpod_kernels.c: every kernel charges its FLOPs to the simulated clock) and the real
# counter-based RNG (kernels/rng.c, its weight fill left to the backend). Not built: data/ (HDF5),
# ckpt/, infer/, cli/ (data/paths.c and tokens_order.c, which need no HDF5, go with config/).
# kernels/moe.c, the experts' routing and their MLP, is the real code (and kernels/moe_bf16.c, the
# MLP on bf16 inputs): its matmuls are the backend's
# (charged), its routing and gathers run on whatever the floats hold: the dry run prices dense
# models. The bf16 kernels are charged as the fp32 ones (bench/simpod_kernels.c). Context
# parallelism's partial attention (kernels/attn_part*.c, bf16 too: bf16_gemm_own charged) and sequence splits (seqsplit.c) are the
# real code too: their matmuls are charged, their softmax loops run as moe.c's routing does.
add_library(mt_kernels STATIC bench/simpod_kernels.c kernels/rng.c kernels/traffic.c kernels/moe.c
            kernels/moe_bf16.c kernels/attn_part.c kernels/attn_part_bwd.c
            kernels/attn_part_bf16.c kernels/seqsplit.c kernels/gemm_bf16_panel.c
            kernels/gemm_f32_panel.c)
set_source_files_properties(kernels/rng.c PROPERTIES
                            COMPILE_DEFINITIONS kern_rng_fill_normal=kern_rng_fill_normal_drawn)
# the memory passes' counts: per simulated rank (SMPI keeps globals per rank; its ranks may share
# a thread)
set_source_files_properties(kernels/traffic.c PROPERTIES COMPILE_DEFINITIONS
                            KERN_TRAFFIC_PER_PROCESS=1)
target_include_directories(mt_kernels PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(mt_kernels PUBLIC mt_bf16 m)
mt_target_warnings(mt_kernels)

add_library(mt_shape STATIC calc/shape.c)
target_include_directories(mt_shape PUBLIC ${PROJECT_SOURCE_DIR})
mt_target_warnings(mt_shape)
file(GLOB MT_SMPI_CALC_SRC CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/calc/*.c)
list(FILTER MT_SMPI_CALC_SRC EXCLUDE REGEX "(_main|/shape)\\.c$")
add_library(mt_calc STATIC ${MT_SMPI_CALC_SRC})
target_link_libraries(mt_calc PUBLIC mt_shape mt_cost)
mt_target_warnings(mt_calc)

set(MT_SMPI_TRAIN_LIBS mt_shape)
foreach(folder config observe model parallel step)
  file(GLOB src CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/train/${folder}/*.c)
  if(folder STREQUAL "config")
    list(APPEND src ${PROJECT_SOURCE_DIR}/data/paths.c ${PROJECT_SOURCE_DIR}/data/tokens_order.c)
  endif()
  add_library(mt_${folder} STATIC ${src})
  target_include_directories(mt_${folder} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(mt_${folder} PUBLIC ${MT_SMPI_TRAIN_LIBS} mt_kernels mt_mesh MPI::MPI_C)
  # smpicc includes <unistd.h> everywhere: its function pipe() is renamed (a function-like macro,
  # so train/'s type `pipe` keeps its name) where it would clash with the type.
  target_compile_options(mt_${folder} PUBLIC "-Dpipe(fds)=posix_pipe(fds)")
  mt_target_warnings(mt_${folder})
  list(PREPEND MT_SMPI_TRAIN_LIBS mt_${folder})
endforeach()

add_executable(simpod-dryrun bench/simpod_dryrun.c)
target_link_libraries(simpod-dryrun PRIVATE ${MT_SMPI_TRAIN_LIBS} mt_calc)
mt_target_warnings(simpod-dryrun)
