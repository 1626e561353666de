import sys

from hicache.cli.main import main

sys.exit(main())
