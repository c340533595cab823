import sys

from compendium.cli import main

sys.exit(main())
