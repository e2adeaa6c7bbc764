# Sourced by tests/tools/lib.sh and bench/lib.sh: gives the Python
# references (Debian's torch and numpy) the BLAS pp links.
#
# Debian's python3-torch links libblas.so.3 and libopenblas.so.0, which the
# alternatives system points at the pthreads build of OpenBLAS. Under
# OMP_NUM_THREADS=N that build runs N threads of its own beside torch's N
# OpenMP threads, and on 2 cores the two pools take turns spinning: a
# SmolLM2 forward runs about 3x slower than with one pool. pp links the
# OpenMP build (Makefile); its folder first on the loader's path gives every
# process the same BLAS and one thread pool.
pp_blas_dir=/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)/openblas-openmp
if [ -e "$pp_blas_dir/libopenblas.so.0" ]; then
	case ":${LD_LIBRARY_PATH:-}:" in
	*":$pp_blas_dir:"*) ;;
	*) export LD_LIBRARY_PATH=$pp_blas_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ;;
	esac
fi
unset pp_blas_dir
