# Mutants of scripts/mutants.sh (sourced at the end of scripts/mutants-list-files.sh, so the numbers continue):
# the runtime's ops (runtime/ops/): their forward and backward wiring, shapes and dtypes.
