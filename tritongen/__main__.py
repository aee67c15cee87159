"""``python -m tritongen``."""

import sys

from tritongen.cli import main

sys.exit(main())
