# Source on the H200 device machine (no registry there): installs the carried CUTLASS wheel and the project.
# Usage: source tools/h200_env.sh   (expects .carry/nvidia_cutlass-4.2.0.0-py3-none-any.whl)
set -e
export DG_SITE=/tmp/dg_site
if [ ! -d "$DG_SITE/cutlass_library" ]; then
    pip install --quiet --no-index --no-deps --target "$DG_SITE" .carry/nvidia_cutlass-4.2.0.0-py3-none-any.whl
fi
export PYTHONPATH="$DG_SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export DG_JIT_CACHE_DIR="${DG_JIT_CACHE_DIR:-/tmp/dg_cache}"
# NOTES: /usr/bin's compiler: the default /opt/gcc wrapper links libstdc++ statically (TOOLCHAIN.md trap).
export DG_JIT_CXX=/usr/bin/g++
# The pip-built launch module (deep_gemm._C), built in place since the checkout is imported from PYTHONPATH.
CC=/usr/bin/gcc CXX=/usr/bin/g++ LDSHARED="/usr/bin/g++ -shared" python setup.py -q build_ext --inplace \
    > /tmp/dg_build_ext.log 2>&1 || { echo "build_ext failed:"; tail -20 /tmp/dg_build_ext.log; }
set +e
