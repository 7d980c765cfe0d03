import sys

from emulator.dataplane.switch import main

sys.exit(main())
