"""`python -m dflash_data` is the `dflash-data` command."""
import sys

from dflash_data.cli import main

sys.exit(main())
