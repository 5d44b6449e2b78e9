"""`python -m openinfer_jax` runs the CLI."""

import sys

from openinfer_jax.cli import main

sys.exit(main())
