from shapelint.cli import main
import sys
sys.exit(main())
