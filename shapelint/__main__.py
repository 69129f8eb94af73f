import sys

from shapelint.cli import main

sys.exit(main())
