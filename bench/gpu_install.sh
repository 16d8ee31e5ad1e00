# Sourced by bench/gpu_check.sh and bench/gpu_check_stack.sh (bash, in the repository root, $PY set, step() defined):
# with INSTALL=1 (the default) Qlib's import closure from the carried cp312 wheels (.whl, no deps, no index) into
# /tmp/site, and the pinned numpy/pandas (.whl/pin) first on the path when the machine's own do not suit;
# INSTALL=0: the Python as it is. Exits 3 when a wheel does not install.
if [ "${INSTALL:-1}" = 1 ]; then
    step "install Qlib's closure (.whl, no deps, no index) into /tmp/site"
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
    export PYTHONPATH=/tmp/site:$PWD
    if ! $PY -c "import sys, pandas; sys.exit(int(pandas.__version__.split('.')[0]) >= 3)" \
       || ! $PY -c "import rolling_calib.qlib_adapter.stacked" 2>/dev/null; then
        step "the machine's numpy/pandas do not suit: the pinned ones (.whl/pin) first"
        $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/pin .whl/pin/*.whl || exit 3
        export PYTHONPATH=/tmp/pin:$PYTHONPATH
    fi
else
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
