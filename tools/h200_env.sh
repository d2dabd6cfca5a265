# Source on the H200 device machine (no registry there; everything the project needs is installed): puts the
# checkout on PYTHONPATH and builds its launch module.
# Usage: source tools/h200_env.sh
set -e
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export DG_JIT_CACHE_DIR="${DG_JIT_CACHE_DIR:-/tmp/dg_cache}"
# The launch module (deep_gemm._C), built in place since the checkout is imported from PYTHONPATH.
# NOTES: /usr/bin's compiler: the default /opt/gcc wrapper links libstdc++ statically (TOOLCHAIN.md trap).
CC=/usr/bin/gcc CXX=/usr/bin/g++ LDSHARED="/usr/bin/g++ -shared" python setup.py -q build_ext --inplace \
    > /tmp/dg_build_ext.log 2>&1 || { echo "build_ext failed:"; tail -20 /tmp/dg_build_ext.log; }
set +e
