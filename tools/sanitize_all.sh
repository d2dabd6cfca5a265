# compute-sanitizer memcheck, racecheck and synccheck over every kernel family (tools/sanitize_driver.py).
# Usage (on the GPU machine): bash tools/sanitize_all.sh OUTDIR [family ...]
#   env TOOLS="memcheck racecheck synccheck" (default all three), SANITIZER_TIMEOUT=seconds per tool (default 500;
#   racecheck of all families takes the longest)
# Writes OUTDIR/sanitizer_<tool>.log and prints one summary line per tool; exit status 1 if any tool reported errors.
OUTDIR=${1:-/tmp/dg_sanitizer}
shift || true
mkdir -p "$OUTDIR"
FAMILIES=${*:+--family $*}
# Compile (and check) everything once without the sanitizer, so the tool runs time launches, not compiles.
timeout 300 python tools/sanitize_driver.py $FAMILIES > "$OUTDIR/driver_plain.log" 2>&1 || {
    echo "driver failed without the sanitizer:"; tail -20 "$OUTDIR/driver_plain.log"; exit 1; }
status=0
for tool in ${TOOLS:-memcheck racecheck synccheck}; do
    timeout ${SANITIZER_TIMEOUT:-500} compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 \
        python tools/sanitize_driver.py $FAMILIES > "$OUTDIR/sanitizer_${tool}.log" 2>&1
    rc=$?
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUTDIR/sanitizer_${tool}.log" | tail -1)
    done_line=$(grep -c "all families done" "$OUTDIR/sanitizer_${tool}.log")
    echo "$tool: exit $rc, driver finished: $done_line, $summary"
    [[ $rc -ne 0 || $done_line -ne 1 ]] && status=1
done
exit $status
