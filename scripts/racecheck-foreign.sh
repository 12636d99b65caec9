#!/usr/bin/env bash
# racecheck-foreign.sh LOG PATTERN: passes when racecheck's LOG (compute-sanitizer --tool racecheck, printed
# in full: --print-limit 0) shows a passing doctest run and every hazard it reports lies in kernels whose
# names match PATTERN (a library's own kernels, e.g. cuBLAS's nvjet_*), none in ours. Fails when the
# reports cannot be read, so a changed report format cannot pass unseen.
set -uo pipefail
log=$1 pattern=$2
grep -q 'Status: SUCCESS' "$log" || { echo "racecheck-foreign: the test run did not pass ($log)"; exit 1; }
errors=$(grep -oE 'RACECHECK SUMMARY: [0-9]+ hazards? displayed \(([0-9]+) errors?' "$log" | grep -oE '[0-9]+ errors?' | grep -oE '[0-9]+')
[ -n "$errors" ] || { echo "racecheck-foreign: no RACECHECK SUMMARY line in $log"; exit 1; }
# each hazard names its two accesses' kernels, one a line: "... Thread (x,y,z) at KERNEL+0x..." (--racecheck-report
# all) or "... access at KERNEL+0x..." (the default); a kernel's name may hold spaces and parentheses
names=$(sed -nE 's/.*(Thread \([0-9,]*\)|access) at (void )?(.*)\+0x[0-9a-f]+.*$/\3/p' "$log")
displayed=$(grep -cE 'Error: (Potential [A-Z]+ hazard|Race reported)' "$log")
echo "racecheck: $errors errors, $displayed displayed; the kernels named:"
[ -n "$names" ] && sort <<<"$names" | uniq -c | cut -c1-160
if [ "$displayed" -lt "$errors" ]; then echo "racecheck-foreign: only $displayed of $errors errors printed (use --print-limit 0)"; exit 1; fi
read_names=$(grep -c . <<<"$names")
if [ "$read_names" -ne $((2 * displayed)) ]; then
  echo "racecheck-foreign: $displayed hazards but $read_names accesses read (two expected each) from $log"; exit 1
fi
ours=$(grep -vE "^($pattern)" <<<"$names" | grep -c .)
[ "$ours" -eq 0 ] || { echo "racecheck-foreign: $ours reported accesses in kernels not matching '$pattern'"; exit 1; }
echo "racecheck-foreign: every report is in a kernel matching '$pattern'"
