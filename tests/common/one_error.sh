# Sourced by the script tests of bad input. one_error WANT RC ERR_FILE FRAGMENT: whether a run that
# exited with RC and wrote its stderr to ERR_FILE ended as bad input must: status WANT and exactly
# one "meshtrain: error:" line, holding FRAGMENT. Sets ERR_N (the error lines) and ERR_LINE (the
# first), for the caller's ok/FAIL line.
one_error() {
  ERR_N=$(grep -c '^meshtrain: error:' "$3")
  ERR_LINE=$(grep -m1 '^meshtrain: error:' "$3")
  [ "$2" -eq "$1" ] && [ "$ERR_N" -eq 1 ] && grep -qF -- "$4" <<<"$ERR_LINE"
}
