# Mutants of scripts/mutants.sh (sourced at the end of scripts/mutants-list-files.sh after mutants-list-ops.sh):
# the model's speculative-decoding ops, the data shards, the trainer's cluster and bucket step, tensors.
