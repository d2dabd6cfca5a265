# Use this checkout's deep_gemm in the current shell without installing it: puts the checkout (the current
# directory) first on PYTHONPATH and builds its launch module deep_gemm._C in place (setup.py also records the
# checkout's version and commit for deep_gemm.build_info()). For machines where the dependencies are installed but
# this checkout is not (e.g. a GPU machine without a package registry).
# Usage, from the checkout root: source tools/use_checkout.sh
set -e
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export DG_JIT_CACHE_DIR="${DG_JIT_CACHE_DIR:-/tmp/dg_cache}"
# NOTES: /usr/bin's compiler: on the GPU machines the default /opt/gcc wrapper links libstdc++ statically, which
# _C, linked against torch's shared libraries, must not.
CC=/usr/bin/gcc CXX=/usr/bin/g++ LDSHARED="/usr/bin/g++ -shared" python setup.py -q build_ext --inplace \
    > /tmp/dg_build_ext.log 2>&1 || { echo "build_ext failed:"; tail -20 /tmp/dg_build_ext.log; }
set +e
