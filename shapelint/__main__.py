import sys

from shapelint.app.cli import main

sys.exit(main())
